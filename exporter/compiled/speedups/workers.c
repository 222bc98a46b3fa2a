/* workers: threads kept for the reads ahead and the halves of long chunks.
 *
 * A part of _speedups.c, which includes the parts in order (one translation unit: the
 * hot calls between them stay inlined); it reads what the parts before it define. */

/* A thread made for each job starts where its maker runs, and waits there (milliseconds, until
 * the scheduler moves it) while another core idles: a chunk's halves then took as long as the
 * whole. Threads kept from job to job are woken where they last ran, on a core of their own. At
 * most WORKERS_MOST are kept; a job none is free for runs in the thread that has it (a half), or
 * in a thread made for it. Needs no GIL: the pool has a lock of its own. */
#define WORKERS_MOST 16

typedef struct Job {
    void *(*f)(void *);
    void *arg;
    struct Job *next;
    pthread_mutex_t lock;
    pthread_cond_t cv;
    int done; /* set under lock once f returned */
} Job;

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_work = PTHREAD_COND_INITIALIZER;
static Job *queue_head, *queue_tail;
static int workers, idle_workers, queued;

static void job_init(Job *j, void *(*f)(void *), void *arg) {
    j->f = f, j->arg = arg, j->next = NULL, j->done = 0;
    pthread_mutex_init(&j->lock, NULL);
    pthread_cond_init(&j->cv, NULL);
}

static void job_run(Job *j) {
    j->f(j->arg);
    pthread_mutex_lock(&j->lock);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->lock); /* (after this, nothing of j is touched: its owner frees it) */
}

/* Until j has run (whoever else waits for it too). */
static void job_wait(Job *j) {
    pthread_mutex_lock(&j->lock);
    while (!j->done) pthread_cond_wait(&j->cv, &j->lock);
    pthread_mutex_unlock(&j->lock);
}

static void job_free(Job *j) {
    pthread_mutex_destroy(&j->lock);
    pthread_cond_destroy(&j->cv);
}

static void *worker_main(void *unused) {
    pthread_mutex_lock(&pool_lock);
    for (;;) {
        while (queue_head == NULL) {
            idle_workers++;
            pthread_cond_wait(&pool_work, &pool_lock);
            idle_workers--;
        }
        Job *j = queue_head;
        queue_head = j->next, queued--;
        if (queue_head == NULL) queue_tail = NULL;
        pthread_mutex_unlock(&pool_lock);
        job_run(j);
        pthread_mutex_lock(&pool_lock);
    }
    return NULL;
}

/* j handed to a kept thread (one made now if none is free and fewer than WORKERS_MOST are
 * kept): 1, or 0 when there is none (then j is the caller's to run). */
static int job_submit(Job *j) {
    pthread_mutex_lock(&pool_lock);
    int ok = idle_workers > queued;
    if (!ok && workers < WORKERS_MOST) {
        pthread_t t;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) == 0) {
            pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
            ok = pthread_create(&t, &attr, worker_main, NULL) == 0;
            pthread_attr_destroy(&attr);
        }
        workers += ok;
    }
    if (ok) {
        if (queue_tail != NULL) queue_tail->next = j;
        else queue_head = j;
        queue_tail = j, queued++;
        pthread_cond_signal(&pool_work);
    }
    pthread_mutex_unlock(&pool_lock);
    return ok;
}

/* f on each of the `np` parts (1 or 2), the first on a kept thread (in this one when none is
 * free). Needs no GIL. */
static void each_part(void *(*f)(void *), Part *parts, int np) {
    Job half;
    job_init(&half, f, &parts[0]);
    int handed = np > 1 && job_submit(&half);
    for (int k = handed; k < np; k++) f(&parts[k]);
    if (handed) job_wait(&half);
    job_free(&half);
}
