/* STREAM-shaped triad (not the reference STREAM): three dynamically allocated arrays of N
 * doubles, a[i] = b[i] + q * c[i] repeated REPS times on one thread, each pass timed; prints
 * the best pass's rate counting 3 x 8 bytes per element as STREAM does, and checks every
 * element of the result. Usage: triad N REPS [OUT]; the line goes to OUT when given (so that a
 * caller need not capture stdout), else to stdout. */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000000;
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    double *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (!a || !b || !c) { printf("malloc failed\n"); return 1; }
    for (size_t i = 0; i < n; i++) { a[i] = 0.0; b[i] = 1.0 + (double)(i % 1000); c[i] = 2.0; }
    const double q = 3.0;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now();
        for (size_t i = 0; i < n; i++) a[i] = b[i] + q * c[i];
        double t = now() - t0;
        if (t < best) best = t;
    }
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) if (a[i] != 1.0 + (double)(i % 1000) + 6.0) bad++;
    double gbs = 3.0 * sizeof(double) * n / best / 1e9;
    FILE *out = argc > 3 ? fopen(argv[3], "w") : stdout;
    if (!out) { printf("cannot write %s\n", argv[3]); return 1; }
    fprintf(out, "triad_best_gbs=%.3f n=%zu reps=%d bad=%zu\n", gbs, n, reps, bad);
    if (out != stdout) fclose(out);
    free(a); free(b); free(c);
    return bad ? 2 : 0;
}
