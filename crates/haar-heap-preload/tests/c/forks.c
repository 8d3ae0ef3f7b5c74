/* Parent and forked child must not share heap memory, threads must allocate and free each
 * other's blocks safely, and an exec'd program must get a heap of its own. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define ROUNDS 20000
static void *slots[THREADS][64];

static void *worker(void *arg) {
    long t = (long)arg;
    for (int r = 0; r < ROUNDS; r++) {
        int k = r % 64;
        /* free a block another thread allocated, when there is one */
        void *p = __atomic_exchange_n(&slots[(t + 1) % THREADS][k], NULL, __ATOMIC_ACQ_REL);
        free(p);
        size_t n = 16 + (size_t)(r * 37 % 4096);
        char *q = malloc(n);
        if (!q) return (void *)1;
        memset(q, (int)t, n);
        void *old = __atomic_exchange_n(&slots[t][k], q, __ATOMIC_ACQ_REL);
        free(old);
    }
    return NULL;
}

int main(void) {
    size_t n = 64 << 20;
    char *buf = malloc(n);
    memset(buf, 'P', n);
    /* The compiler must not assume fork leaves buf alone: it is memory another process
     * could share, which is what this test is about. */
    __asm__ volatile("" : : "r"(buf) : "memory");
    pid_t pid = fork();
    if (pid == 0) {
        memset(buf, 'C', n);       /* the child's copy only */
        char *more = malloc(n);    /* and the child allocates on its own */
        memset(more, 'M', n);
        _exit(buf[n - 1] == 'C' && more[0] == 'M' ? 0 : 2);
    }
    int st;
    waitpid(pid, &st, 0);
    __asm__ volatile("" : : "r"(buf) : "memory");
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { printf("child failed\n"); return 1; }
    for (size_t i = 0; i < n; i += 4096)
        if (buf[i] != 'P') { printf("the child's writes reached the parent at %zu\n", i); return 1; }
    char *after = malloc(n);      /* the parent's allocator state is intact */
    memset(after, 'A', n);
    if (buf[0] != 'P') { printf("allocation after fork overlapped\n"); return 1; }

    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, worker, (void *)t);
    for (int t = 0; t < THREADS; t++) {
        void *r;
        pthread_join(th[t], &r);
        if (r) { printf("thread %d: malloc failed\n", t); return 1; }
    }
    fflush(stdout);
    /* an exec'd program (a shell running a pipeline) while this one still holds the pool */
    if (system("x=$(echo exec); echo \"$x ok\"") != 0) { printf("system failed\n"); return 1; }
    printf("forks ok\n");
    return 0;
}
