/* One haar_t shared by threads (the header says calls on it are serialised): 4 threads
 * archive 100 fields each through it, with their own keys, then one flush; all 400 are
 * listed and read back. Also: each thread has its own last error.
 * usage: threads CONFIG.yaml   ("-": open with a NULL path, i.e. $HAAR_CONFIG) */
#include "haar.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

static haar_t *h;
static int failed = 0;

static void *producer(void *arg) {
    long t = (long)arg;
    haar_key_t *k = NULL;
    if (haar_key_new(&k) != HAAR_OK) return (void *)1;
    const char *base[][2] = {{"class", "od"},   {"expver", "1"},   {"stream", "oper"},
                             {"date", "20261121"}, {"time", "12"}, {"domain", "g"},
                             {"type", "fc"},    {"levtype", "sfc"}};
    for (int i = 0; i < 8; i++) haar_key_add(k, base[i][0], base[i][1]);
    char step[16], param[16];
    snprintf(step, sizeof step, "%ld", t);
    haar_key_add(k, "step", step);
    unsigned char data[256];
    for (int p = 1; p <= 100; p++) {
        snprintf(param, sizeof param, "%d", p);
        haar_key_add(k, "param", param);
        memset(data, (int)(t * 100 + p), sizeof data);
        if (haar_archive(h, k, data, sizeof data) != HAAR_OK) {
            fprintf(stderr, "thread %ld: %s\n", t, haar_last_error());
            failed = 1;
        }
    }
    /* A failure in this thread sets this thread's message only. */
    char expect[64];
    snprintf(expect, sizeof expect, "thread-%ld-request", t);
    haar_list_t *it = NULL;
    if (haar_list(h, expect, &it) != HAAR_ERR_INPUT || !strstr(haar_last_error(), expect)) {
        fprintf(stderr, "thread %ld: own last error: %s\n", t, haar_last_error());
        failed = 1;
    }
    haar_key_free(k);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    if (haar_open(strcmp(argv[1], "-") == 0 ? NULL : argv[1], &h) != HAAR_OK) {
        fprintf(stderr, "open: %s\n", haar_last_error());
        return 1;
    }
    pthread_t th[4];
    for (long t = 0; t < 4; t++) pthread_create(&th[t], NULL, producer, (void *)t);
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    if (haar_flush(h) != HAAR_OK) {
        fprintf(stderr, "flush: %s\n", haar_last_error());
        return 1;
    }
    haar_list_t *it = NULL;
    size_t n = 0;
    if (haar_list(h, "class=od,expver=1", &it) != HAAR_OK || haar_list_count(it, &n) != HAAR_OK ||
        n != 400) {
        fprintf(stderr, "listed %zu of 400: %s\n", n, haar_last_error());
        return 1;
    }
    haar_list_free(it);
    haar_reader_t *r = NULL;
    const void *view;
    size_t len;
    if (haar_retrieve(h,
                      "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,"
                      "levtype=sfc,step=3,param=7",
                      &r) != HAAR_OK ||
        haar_reader_view(r, &view, &len, NULL) != HAAR_OK || len != 256 ||
        ((const unsigned char *)view)[0] != (unsigned char)(3 * 100 + 7)) {
        fprintf(stderr, "read back: %s\n", haar_last_error());
        return 1;
    }
    haar_reader_free(r);
    haar_close(h);
    if (failed) return 1;
    printf("threads: ok\n");
    return 0;
}
