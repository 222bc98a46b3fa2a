"""Start-ups: llama-server's and vllm-omni's start-up phases, followed and reported."""
