/* haar_close racing other threads (issue 27): a C program's view of handles that cannot
 * alias. Per round: a haar_t on store A; one thread archives and flushes through it, one
 * retrieves through it; the main thread closes it after a short while and at once opens a
 * haar_t on store B (it may take the closed one's slot). Every call of the two threads must
 * succeed or give HAAR_ERR_INPUT saying the handle was freed, never crash, and nothing may
 * reach store B.
 * usage: close_race CONFIG_A.yaml CONFIG_B.yaml ROUNDS */
#define _POSIX_C_SOURCE 200809L
#include "haar.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FIELD "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,levtype=sfc"

static haar_t *shared; /* the handle the threads use, closed under them */
static int failed = 0, refused = 0, completed = 0;
static pthread_mutex_t counts = PTHREAD_MUTEX_INITIALIZER;

/* A call's outcome: 0 go on, 1 refused as freed (stop), and a failure otherwise. */
static int outcome(int rc, const char *what) {
    pthread_mutex_lock(&counts);
    int stop = 0;
    if (rc == HAAR_OK) {
        completed++;
    } else if (rc == HAAR_ERR_INPUT && strstr(haar_last_error(), "already freed")) {
        refused++;
        stop = 1;
    } else {
        fprintf(stderr, "%s: code %d: %s\n", what, rc, haar_last_error());
        failed = 1;
        stop = 1;
    }
    pthread_mutex_unlock(&counts);
    return stop;
}

static void *archiver(void *arg) {
    haar_t *h = arg;
    char key[256], data[64];
    for (int i = 1; i < 500; i++) {
        snprintf(key, sizeof key, FIELD ",step=%d,param=167", i);
        snprintf(data, sizeof data, "GRIB %d 7777", i);
        if (outcome(haar_archive_str(h, key, data, strlen(data)), "archive")) return NULL;
        if (outcome(haar_flush(h), "flush")) return NULL;
    }
    return NULL;
}

static void *retriever(void *arg) {
    haar_t *h = arg;
    for (int i = 1; i < 500; i++) {
        haar_reader_t *r = NULL;
        int rc = haar_retrieve(h, FIELD ",step=0,param=167", &r);
        if (rc == HAAR_OK) {
            uint64_t size = 0;
            if (haar_reader_size(r, &size) != HAAR_OK || size != strlen("GRIB 0 7777")) {
                fprintf(stderr, "retrieve: size %llu\n", (unsigned long long)size);
                failed = 1;
            }
            haar_reader_free(r);
        }
        if (outcome(rc, "retrieve")) return NULL;
    }
    return NULL;
}

static size_t count(haar_t *h) {
    haar_list_t *it = NULL;
    size_t n = (size_t)-1;
    if (haar_list(h, NULL, &it) != HAAR_OK || haar_list_count(it, &n) != HAAR_OK) {
        fprintf(stderr, "list: %s\n", haar_last_error());
        failed = 1;
    }
    haar_list_free(it);
    return n;
}

int main(int argc, char **argv) {
    if (argc != 4) return 2;
    int rounds = atoi(argv[3]);
    for (int round = 0; round < rounds && !failed; round++) {
        if (haar_open(argv[1], &shared) != HAAR_OK) {
            fprintf(stderr, "open A: %s\n", haar_last_error());
            return 1;
        }
        if (haar_archive_str(shared, FIELD ",step=0,param=167", "GRIB 0 7777", 11) != HAAR_OK ||
            haar_flush(shared) != HAAR_OK) {
            fprintf(stderr, "archive: %s\n", haar_last_error());
            return 1;
        }
        pthread_t a, r;
        pthread_create(&a, NULL, archiver, shared);
        pthread_create(&r, NULL, retriever, shared);
        struct timespec pause = {0, 100000L * (round % 20)};
        nanosleep(&pause, NULL);
        if (haar_close(shared) != HAAR_OK) {
            fprintf(stderr, "close: %s\n", haar_last_error());
            failed = 1;
        }
        haar_t *other = NULL;
        if (haar_open(argv[2], &other) != HAAR_OK) {
            fprintf(stderr, "open B: %s\n", haar_last_error());
            return 1;
        }
        pthread_join(a, NULL);
        pthread_join(r, NULL);
        /* The closed handle stays refused while the new one is open. */
        if (haar_flush(shared) != HAAR_ERR_INPUT || haar_close(shared) != HAAR_ERR_INPUT) {
            fprintf(stderr, "a closed handle was not refused\n");
            failed = 1;
        }
        if (count(other) != 0) {
            fprintf(stderr, "round %d: a closed handle archived into store B\n", round);
            failed = 1;
        }
        haar_close(other);
    }
    if (failed) return 1;
    if (refused == 0 || completed == 0) {
        fprintf(stderr, "no race: %d refused, %d completed\n", refused, completed);
        return 1;
    }
    printf("close_race: ok (%d calls completed, %d refused as freed)\n", completed, refused);
    return 0;
}
