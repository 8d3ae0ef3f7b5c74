/*
 * Shared helpers for haar's FDB5 peer benchmarks (fdb5_peer.c, fdb5_visibility.c).
 *
 * Everything here is plain C over FDB5's public C API (fdb5/api/fdb_c.h, 5.10.x):
 * self-contained FDB5 setup under a ROOT directory, the benchmark key space,
 * deterministic payloads, timing and percentiles, and stdout hygiene (eckit may
 * log to stdout; the JSON result line must be the only thing there).
 */
#ifndef HAAR_BENCH_FDB5_COMMON_H
#define HAAR_BENCH_FDB5_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <fdb5/api/fdb_c.h>

static const char *g_prog = "fdb5";

static void die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", g_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(1);
}

/* Wrap every FDB5 C API call: on failure name the call and FDB5's message. */
#define FDB_CHECK(call)                                                              \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ != FDB_SUCCESS)                                                      \
            die("%s failed (rc=%d): %s", #call, rc_, fdb_error_string(rc_));         \
    } while (0)

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static long parse_long(const char *s, const char *what, long min) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || !end || *end || v < min) die("bad %s '%s' (want integer >= %ld)", what, s, min);
    return v;
}

/* ---------------------------------------------------------------- setup ---- */

static void mkdir_p(const char *path) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) die("path too long: %s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) && errno != EEXIST) die("mkdir %s: %s", buf, strerror(errno));
            *p = '/';
        }
    }
    if (mkdir(buf, 0755) && errno != EEXIST) die("mkdir %s: %s", buf, strerror(errno));
}

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    if (remove(p)) die("remove %s: %s", p, strerror(errno));
    return 0;
}

static void rm_rf(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS)) die("rm -rf %s failed", path);
}

static void copy_file(const char *src, const char *dst) {
    FILE *in = fopen(src, "rb");
    if (!in) die("open %s: %s (is the fdb5 package installed?)", src, strerror(errno));
    FILE *out = fopen(dst, "wb");
    if (!out) die("create %s: %s", dst, strerror(errno));
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, out) != n) die("write %s: %s", dst, strerror(errno));
    if (ferror(in)) die("read %s: %s", src, strerror(errno));
    fclose(in);
    if (fclose(out)) die("close %s: %s", dst, strerror(errno));
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) die("create %s: %s", path, strerror(errno));
    fputs(text, f);
    if (fclose(f)) die("close %s: %s", path, strerror(errno));
}

/*
 * Self-contained FDB5 under ROOT:
 *   ROOT/fdb5-config.yaml  {type: local, engine: toc, schema: ROOT/schema,
 *                           spaces: [{handler: Default, roots: [{path: ROOT/db}]}]}
 *   ROOT/schema            copy of /etc/fdb/schema
 *   ROOT/db/               the single root
 *   ROOT/dbnames           empty (FDB_DBNAMES_FILE; newer FDB5s choke on Debian's)
 * If `fresh`, ROOT/db is emptied first.  Must run before fdb_initialise().
 */
static void fdb_setup_root(const char *root_in, int fresh) {
    char root[4096], p[4200], cfg[16384];
    if (root_in[0] == '/') {
        snprintf(root, sizeof root, "%s", root_in);
    } else {
        char cwd[2048];
        if (!getcwd(cwd, sizeof cwd)) die("getcwd: %s", strerror(errno));
        snprintf(root, sizeof root, "%s/%s", cwd, root_in);
    }
    size_t l = strlen(root);
    while (l > 1 && root[l - 1] == '/') root[--l] = 0;

    mkdir_p(root);
    snprintf(p, sizeof p, "%s/db", root);
    if (fresh) rm_rf(p);
    mkdir_p(p);

    snprintf(p, sizeof p, "%s/schema", root);
    copy_file("/etc/fdb/schema", p);

    snprintf(p, sizeof p, "%s/dbnames", root);
    write_text(p, "");
    setenv("FDB_DBNAMES_FILE", p, 1);

    snprintf(cfg, sizeof cfg,
             "---\ntype: local\nengine: toc\nschema: %s/schema\n"
             "spaces:\n  - handler: Default\n    roots:\n      - path: %s/db\n",
             root, root);
    /* FDB5_PEER_REMOTE=HOST:PORT: go through a running fdb-server (FDB5's remote front-end)
     * instead of the local root. */
    const char *remote = getenv("FDB5_PEER_REMOTE");
    if (remote) {
        char host[1024];
        const char *colon = strrchr(remote, ':');
        if (!colon || colon == remote || (size_t)(colon - remote) >= sizeof host)
            die("FDB5_PEER_REMOTE=%s: expected HOST:PORT", remote);
        memcpy(host, remote, (size_t)(colon - remote));
        host[colon - remote] = 0;
        snprintf(cfg, sizeof cfg, "---\ntype: remote\nhost: %s\nport: %s\n", host, colon + 1);
    }
    snprintf(p, sizeof p, "%s/fdb5-config.yaml", root);
    write_text(p, cfg);
    setenv("FDB5_CONFIG_FILE", p, 1);
}

/*
 * eckit may log to stdout.  Move the real stdout aside and point fd 1 at stderr,
 * so the JSON result line (written with json_out) is the only thing on stdout.
 */
static FILE *g_json_out = NULL;
static void stdout_guard(void) {
    fflush(stdout);
    int fd = dup(1);
    if (fd < 0) die("dup stdout: %s", strerror(errno));
    if (dup2(2, 1) < 0) die("dup2: %s", strerror(errno));
    g_json_out = fdopen(fd, "w");
    if (!g_json_out) die("fdopen: %s", strerror(errno));
}

static const char *fdb5_version_string(void) {
    const char *v = NULL;
    if (fdb_version(&v) != FDB_SUCCESS || !v) return "unknown";
    return v;
}

/* ------------------------------------------------------------ key space ---- */

/* Field i: step = i / 100, levelist = i % 100 + 1 (100 levels per step). */
static const char *const K_NAMES[] = {"class", "expver", "stream", "date",  "time",    "domain",
                                      "type",  "levtype", "levelist", "step", "param"};
enum { K_N = 11, K_LEVELIST = 8, K_STEP = 9 };
static const char *const K_FIXED[] = {"od", "0001", "oper", "20261121", "1200", "g",
                                      "fc", "pl",   NULL,   NULL,       "130"};

typedef struct {
    char levelist[24];
    char step[24];
    const char *v[K_N];
} field_vals;

static void field_values(long i, field_vals *f) {
    snprintf(f->levelist, sizeof f->levelist, "%ld", i % 100 + 1);
    snprintf(f->step, sizeof f->step, "%ld", i / 100);
    for (int k = 0; k < K_N; k++) f->v[k] = K_FIXED[k];
    f->v[K_LEVELIST] = f->levelist;
    f->v[K_STEP] = f->step;
}

static fdb_key_t *make_key(long i) {
    field_vals f;
    field_values(i, &f);
    fdb_key_t *key = NULL;
    FDB_CHECK(fdb_new_key(&key));
    for (int k = 0; k < K_N; k++) FDB_CHECK(fdb_key_add(key, K_NAMES[k], f.v[k]));
    return key;
}

static fdb_request_t *make_request(long i) {
    field_vals f;
    field_values(i, &f);
    fdb_request_t *req = NULL;
    FDB_CHECK(fdb_new_request(&req));
    for (int k = 0; k < K_N; k++) {
        const char *vals[1] = {f.v[k]};
        FDB_CHECK(fdb_request_add(req, K_NAMES[k], vals, 1));
    }
    return req;
}

/* -------------------------------------------------------------- payload ---- */

/*
 * Payload of field i (SIZE >= 16): "GRIB" | i as u64 LE | xorshift64 bytes | "7777".
 * NBUF buffers are pre-generated (xorshift seeded by buffer index); field i uses
 * buffer i % NBUF with its own index patched in at offset 4 just before archive
 * (fdb_archive copies the bytes before returning), so every field is distinct and
 * a reader can check it got the field it asked for.
 */
enum { NBUF = 8 };

static void fill_payload(unsigned char *buf, size_t size, uint64_t seed) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 0x2545F4914F6CDD1Dull;
    if (!x) x = 1;
    for (size_t j = 4; j + 4 < size; j += 8) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        size_t n = size - 4 - j < 8 ? size - 4 - j : 8;
        memcpy(buf + j, &x, n);
    }
    memcpy(buf, "GRIB", 4);
    memcpy(buf + size - 4, "7777", 4);
}

static void stamp_payload(unsigned char *buf, uint64_t i) {
    for (int b = 0; b < 8; b++) buf[4 + b] = (unsigned char)(i >> (8 * b));
}

static uint64_t payload_index(const unsigned char *buf) {
    uint64_t i = 0;
    for (int b = 0; b < 8; b++) i |= (uint64_t)buf[4 + b] << (8 * b);
    return i;
}

/* ---------------------------------------------------------- percentiles ---- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of v[0..n) (sorted in place). */
static double percentile(double *v, size_t n, double q) {
    if (!n) return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t r = (size_t)(q * (double)n + 0.999999999);
    if (r < 1) r = 1;
    if (r > n) r = n;
    return v[r - 1];
}

#endif
