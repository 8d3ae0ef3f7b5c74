/*
 * stream_ref.c: a reimplementation of the rules of John D. McCalpin's STREAM benchmark,
 * version 5.10, used by bench/stream-compare.sh as the reference for `haar stream`.
 *
 * This is NOT McCalpin's stream.c and contains none of its code: the reference source is not
 * available offline here, so this file re-implements what it does, from its published rules:
 *
 *   - three static arrays a, b, c of STREAM_ARRAY_SIZE doubles (compile-time, default
 *     10,000,000; the rule is each array >= 4x the sum of all last-level caches used);
 *   - initialisation a = 1, b = 2, c = 0 in a parallel loop (first touch), then a timed
 *     a = 2a pass used only to compare against the clock granularity;
 *   - NTIMES (default 10) iterations of copy c = a, scale b = s*c, add c = a + b,
 *     triad a = b + s*c with s = 3.0, each kernel timed with gettimeofday() around one
 *     OpenMP parallel for (static schedule);
 *   - the first iteration is not counted; per kernel min, average and max time;
 *     Best Rate MB/s = 1e-6 * bytes / min time, with bytes = 2, 2, 3, 3 words per element;
 *   - validation: the same recurrence run on scalars, average absolute error per array
 *     relative to the expected value must be below 1e-13 for doubles.
 *
 * Build: gcc -O2 -fopenmp -DSTREAM_ARRAY_SIZE=N stream_ref.c -o stream_ref
 * (OpenMP optional: without -fopenmp it runs on one thread). Threads and pinning come from
 * OMP_NUM_THREADS, OMP_PROC_BIND and OMP_PLACES as with the reference.
 * Output follows the reference's table layout so the same parsers read both.
 */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#ifndef STREAM_ARRAY_SIZE
#define STREAM_ARRAY_SIZE 10000000
#endif
#ifndef NTIMES
#define NTIMES 10
#endif
#if NTIMES < 2
#error "NTIMES must be at least 2: the first iteration is not counted"
#endif
#ifndef OFFSET
#define OFFSET 0
#endif

typedef double real;

static real a[STREAM_ARRAY_SIZE + OFFSET], b[STREAM_ARRAY_SIZE + OFFSET],
    c[STREAM_ARRAY_SIZE + OFFSET];

static const char *names[4] = {"Copy:      ", "Scale:     ", "Add:       ", "Triad:     "};
static const double words[4] = {2, 2, 3, 3};

static double now_seconds(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + 1.0e-6 * (double)tv.tv_usec;
}

/* Smallest observable clock step, in microseconds (at least 1). */
static int clock_step_us(void) {
    double samples[20];
    for (int i = 0; i < 20; i++) {
        double t0 = now_seconds(), t1;
        while ((t1 = now_seconds()) - t0 < 1.0e-6) {
        }
        samples[i] = t1;
    }
    int best = 1000000;
    for (int i = 1; i < 20; i++) {
        int d = (int)(1.0e6 * (samples[i] - samples[i - 1]));
        if (d < best) best = d > 0 ? d : best;
    }
    return best < 1 ? 1 : best;
}

static int validate(void) {
    real aj = 1.0, bj = 2.0, cj = 0.0, s = 3.0;
    aj = 2.0 * aj;
    for (int k = 0; k < NTIMES; k++) {
        cj = aj;
        bj = s * cj;
        cj = aj + bj;
        aj = bj + s * cj;
    }
    double ea = 0, eb = 0, ec = 0;
    for (long j = 0; j < STREAM_ARRAY_SIZE; j++) {
        ea += fabs(a[j] - aj);
        eb += fabs(b[j] - bj);
        ec += fabs(c[j] - cj);
    }
    ea /= STREAM_ARRAY_SIZE;
    eb /= STREAM_ARRAY_SIZE;
    ec /= STREAM_ARRAY_SIZE;
    const double eps = 1.0e-13;
    int bad = 0;
    if (!(fabs(ea / aj) <= eps)) { printf("Failed Validation on array a[]: avg error %e\n", ea); bad = 1; }
    if (!(fabs(eb / bj) <= eps)) { printf("Failed Validation on array b[]: avg error %e\n", eb); bad = 1; }
    if (!(fabs(ec / cj) <= eps)) { printf("Failed Validation on array c[]: avg error %e\n", ec); bad = 1; }
    if (!bad) printf("Solution Validates: avg error less than %e on all three arrays\n", eps);
    return bad;
}

int main(void) {
    double times[4][NTIMES];
    const real scalar = 3.0;
    long j;

    printf("stream_ref (a reimplementation of the STREAM 5.10 rules; not McCalpin's code)\n");
    printf("Array size = %llu (elements), Offset = %d (elements)\n",
           (unsigned long long)STREAM_ARRAY_SIZE, OFFSET);
    printf("Memory per array = %.1f MiB (= %.1f GiB).\n",
           sizeof(real) * (double)STREAM_ARRAY_SIZE / 1048576.0,
           sizeof(real) * (double)STREAM_ARRAY_SIZE / 1073741824.0);
    printf("Each kernel will be executed %d times.\n", NTIMES);
#ifdef _OPENMP
#pragma omp parallel
#pragma omp master
    printf("Number of Threads counted = %i\n", omp_get_num_threads());
#endif

#pragma omp parallel for
    for (j = 0; j < STREAM_ARRAY_SIZE; j++) {
        a[j] = 1.0;
        b[j] = 2.0;
        c[j] = 0.0;
    }
    int step = clock_step_us();
    printf("Your clock granularity/precision appears to be %d microseconds.\n", step);
    double t = now_seconds();
#pragma omp parallel for
    for (j = 0; j < STREAM_ARRAY_SIZE; j++) a[j] = 2.0E0 * a[j];
    t = 1.0e6 * (now_seconds() - t);
    printf("Each test below will take on the order of %d microseconds.\n", (int)t);
    printf("   (= %d clock ticks)\n", (int)(t / step));

    for (int k = 0; k < NTIMES; k++) {
        times[0][k] = now_seconds();
#pragma omp parallel for
        for (j = 0; j < STREAM_ARRAY_SIZE; j++) c[j] = a[j];
        times[0][k] = now_seconds() - times[0][k];

        times[1][k] = now_seconds();
#pragma omp parallel for
        for (j = 0; j < STREAM_ARRAY_SIZE; j++) b[j] = scalar * c[j];
        times[1][k] = now_seconds() - times[1][k];

        times[2][k] = now_seconds();
#pragma omp parallel for
        for (j = 0; j < STREAM_ARRAY_SIZE; j++) c[j] = a[j] + b[j];
        times[2][k] = now_seconds() - times[2][k];

        times[3][k] = now_seconds();
#pragma omp parallel for
        for (j = 0; j < STREAM_ARRAY_SIZE; j++) a[j] = b[j] + scalar * c[j];
        times[3][k] = now_seconds() - times[3][k];
    }

    printf("Function    Best Rate MB/s  Avg time     Min time     Max time\n");
    for (int i = 0; i < 4; i++) {
        double mn = FLT_MAX, mx = 0, avg = 0;
        for (int k = 1; k < NTIMES; k++) {
            avg += times[i][k];
            if (times[i][k] < mn) mn = times[i][k];
            if (times[i][k] > mx) mx = times[i][k];
        }
        avg /= (double)(NTIMES - 1);
        double bytes = words[i] * sizeof(real) * (double)STREAM_ARRAY_SIZE;
        printf("%s%12.1f  %11.6f  %11.6f  %11.6f\n", names[i], 1.0e-6 * bytes / mn, avg, mn, mx);
    }
    return validate();
}
