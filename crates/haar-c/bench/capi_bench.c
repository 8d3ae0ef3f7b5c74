/* The C side of the libhaar archive+flush benchmark (run by examples/capi_bench.rs, which
 * runs the same load through the Rust Store in the same run).
 *
 * usage: capi_bench CONFIG.yaml FIELDS BYTES PER_STEP [batched]
 * Archives FIELDS fields of BYTES bytes, keyed like a model's output (levtype=pl; per step
 * PER_STEP fields = params x 10 levels... see key_of), flushing after every PER_STEP fields;
 * with "batched", the three values and the archive go in one haar_archive_with call instead
 * of three haar_key_add and one haar_archive;
 * prints "seconds=S" for the archive+flush loop only (the store is opened before the clock
 * starts and closed after it stops). */
#define _POSIX_C_SOURCE 200809L
#include "haar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                               \
    do {                                                                          \
        if ((call) != HAAR_OK) {                                                  \
            fprintf(stderr, "%s: %s\n", #call, haar_last_error());                \
            exit(1);                                                              \
        }                                                                         \
    } while (0)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: %s CONFIG.yaml FIELDS BYTES PER_STEP [batched]\n", argv[0]);
        return 2;
    }
    int batched = argc == 6 && strcmp(argv[5], "batched") == 0;
    const char *keywords[3] = {"levelist", "step", "param"};
    long fields = atol(argv[2]), per_step = atol(argv[4]);
    size_t bytes = (size_t)atol(argv[3]);
    unsigned char *data = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) data[i] = (unsigned char)(i * 31 + 7);

    haar_t *h = NULL;
    CHECK(haar_open(argv[1], &h));
    haar_key_t *key = NULL;
    CHECK(haar_key_new(&key));
    const char *base[][2] = {{"class", "od"},   {"expver", "1"},     {"stream", "oper"},
                             {"date", "20261121"}, {"time", "12"},   {"domain", "g"},
                             {"type", "fc"},    {"levtype", "pl"}};
    for (size_t i = 0; i < sizeof base / sizeof base[0]; i++) CHECK(haar_key_add(key, base[i][0], base[i][1]));

    /* The values as text, made before the clock starts (as the Rust side does): the loop
     * times the API, not snprintf. */
    long nvalues = per_step + fields / per_step + 2;
    char(*text)[24] = malloc((size_t)nvalues * sizeof *text);
    for (long v = 0; v < nvalues; v++) snprintf(text[v], sizeof text[v], "%ld", v);
    double t0 = now();
    for (long i = 0; i < fields; i++) {
        /* Field i of a step: level (i % per_step) % 10, param (i % per_step) / 10. */
        long in_step = i % per_step;
        if (batched) {
            const char *values[3] = {text[1 + in_step % 10], text[i / per_step],
                                     text[1 + in_step / 10]};
            CHECK(haar_archive_with(h, key, 3, keywords, values, data, bytes));
        } else {
            CHECK(haar_key_add(key, "levelist", text[1 + in_step % 10]));
            CHECK(haar_key_add(key, "step", text[i / per_step]));
            CHECK(haar_key_add(key, "param", text[1 + in_step / 10]));
            CHECK(haar_archive(h, key, data, bytes));
        }
        if (in_step == per_step - 1 || i == fields - 1) CHECK(haar_flush(h));
    }
    double t = now() - t0;
    CHECK(haar_key_free(key));
    CHECK(haar_close(h));
    printf("seconds=%.6f\n", t);
    free(data);
    free(text);
    return 0;
}
