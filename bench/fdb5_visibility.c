/*
 * fdb5_visibility: how long after fdb_flush() returns does a polling reader in
 * another process see the field?  FDB5 side of haar's visibility benchmark.
 *
 *   fdb5_visibility ROOT NFIELDS [SIZE]      (SIZE defaults to 65536)
 *
 * Same key space and payload as fdb5_peer (field i: step=i/100, levelist=i%100+1).
 * ROOT/db is emptied first.  The process forks (before fdb_initialise) into:
 *   writer: one handle; per field: wait until the reader has polled for the
 *           field once and missed it, wait a uniform random fraction of that
 *           poll's duration (so the flush lands at a random phase of the
 *           reader's polling, as for an independent reader), archive, flush,
 *           stamp the flush-return time, then wait until the reader has seen it;
 *   reader: per field, polls with a NEW handle each time (fdb_new_handle,
 *           fdb_retrieve, datareader open/read, fdb_delete_handle) until it gets
 *           the full field, and stamps that time.  A fresh handle per poll is
 *           required: an FDB5 handle that has already read a database keeps
 *           returning nothing, without error, for data flushed later.
 * Latency = visible - flush returned (CLOCK_MONOTONIC, shared across processes).
 * It can be slightly negative: the toc entry becomes visible inside fdb_flush.
 * Also reported: flush cost, polls per field, and the mean cost of one poll split
 * into fdb_new_handle and retrieve+read+fdb_delete_handle.
 *
 * Output: one JSON line on stdout ("mode":"visibility").  Errors: stderr, exit 1.
 */
#include "fdb5_common.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

typedef struct {
    volatile long seen;      /* reader: number of fields seen so far */
    volatile long failed;    /* either side gave up */
    volatile long missed;    /* reader: fields 0..missed-1 have had at least one empty poll */
    volatile uint64_t last_poll_ns; /* reader: duration of its latest empty poll */
    double handle_us;        /* reader: mean fdb_new_handle time per poll */
    double retrieve_us;      /* reader: mean retrieve+read+delete_handle time per poll */
    long poll_errors;        /* reader: polls whose retrieve/open threw */
    char first_error[200];   /* reader: message of the first such error */
} shared_hdr;

static uint64_t *g_flush_start, *g_flush_end, *g_visible, *g_polls;
static shared_hdr *g_sh;

static const uint64_t TIMEOUT_NS = 30ull * 1000000000ull;

static uint64_t g_handle_ns, g_retrieve_ns; /* reader-local sums over all polls */
static uint64_t g_poll_errors;                /* reader-local: polls that threw */
static char g_first_error[200];

static int poll_once(long i, unsigned char *buf, size_t cap, long size) {
    uint64_t t0 = now_ns();
    fdb_handle_t *fdb = NULL;
    FDB_CHECK(fdb_new_handle(&fdb));
    uint64_t t1 = now_ns();
    fdb_request_t *req = make_request(i);
    fdb_datareader_t *dr = NULL;
    FDB_CHECK(fdb_new_datareader(&dr));
    size_t got = 0;
    /*
     * A retrieve racing with the writer can throw: FDB5 creates the database
     * directory (and toc) before it copies the schema into it, so an early poll
     * fails with "Cannot open .../schema".  A polling reader has to treat that as
     * "not there yet"; count it and poll again.
     */
    int rc = fdb_retrieve(fdb, req, dr);
    long est = 0;
    if (rc == FDB_SUCCESS) rc = fdb_datareader_open(dr, &est);
    if (rc == FDB_SUCCESS) {
        for (;;) {
            long r = 0;
            FDB_CHECK(fdb_datareader_read(dr, buf + got, (long)(cap - got), &r));
            if (r <= 0) break;
            got += (size_t)r;
            if (got == cap) break;
        }
        FDB_CHECK(fdb_datareader_close(dr));
    } else {
        if (!g_first_error[0])
            snprintf(g_first_error, sizeof g_first_error, "%s", fdb_error_string(rc));
        g_poll_errors++;
    }
    FDB_CHECK(fdb_delete_datareader(dr));
    FDB_CHECK(fdb_delete_request(req));
    FDB_CHECK(fdb_delete_handle(fdb));
    uint64_t t2 = now_ns();
    g_handle_ns += t1 - t0;
    g_retrieve_ns += t2 - t1;
    if (got == 0) return 0;
    if (got != (size_t)size || memcmp(buf, "GRIB", 4) || payload_index(buf) != (uint64_t)i ||
        memcmp(buf + size - 4, "7777", 4))
        die("reader: field %ld visible but wrong (%zu bytes, index %llu)", i, got,
            (unsigned long long)payload_index(buf));
    return 1;
}

static void reader(long n, long size) {
    g_prog = "fdb5_visibility(reader)";
    FDB_CHECK(fdb_initialise());
    size_t cap = (size_t)size + 4096;
    unsigned char *buf = malloc(cap);
    if (!buf) die("out of memory");
    uint64_t npolls = 0;
    for (long i = 0; i < n; i++) {
        uint64_t t0 = now_ns();
        uint64_t polls = 0;
        for (;;) {
            if (g_sh->failed) exit(1);
            polls++;
            uint64_t tp = now_ns();
            if (poll_once(i, buf, cap, size)) break;
            g_sh->last_poll_ns = now_ns() - tp;
            __atomic_store_n(&g_sh->missed, i + 1, __ATOMIC_RELEASE);
            if (now_ns() - t0 > TIMEOUT_NS) {
                g_sh->failed = 1;
                die("field %ld not visible after %llu polls / 30 s", i,
                    (unsigned long long)polls);
            }
        }
        g_visible[i] = now_ns();
        g_polls[i] = polls;
        __atomic_store_n(&g_sh->seen, i + 1, __ATOMIC_RELEASE);
        npolls += polls;
    }
    g_sh->handle_us = (double)g_handle_ns / 1e3 / (double)npolls;
    g_sh->retrieve_us = (double)g_retrieve_ns / 1e3 / (double)npolls;
    g_sh->poll_errors = (long)g_poll_errors;
    memcpy(g_sh->first_error, g_first_error, sizeof g_first_error);
    exit(0);
}

static pid_t g_reader_pid;

static void writer(long n, long size) {
    g_prog = "fdb5_visibility(writer)";
    FDB_CHECK(fdb_initialise());
    unsigned char *buf = malloc((size_t)size);
    if (!buf) die("out of memory");
    fill_payload(buf, (size_t)size, 1);
    fdb_handle_t *fdb = NULL;
    FDB_CHECK(fdb_new_handle(&fdb));
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    for (long i = 0; i < n; i++) {
        /*
         * Flush at a random phase of the reader's polling: wait until it has
         * polled field i once and found nothing, then wait a uniform random
         * fraction of its last poll duration.
         */
        uint64_t tw = now_ns();
        while (__atomic_load_n(&g_sh->missed, __ATOMIC_ACQUIRE) <= i) {
            if (g_sh->failed) exit(1);
            int st;
            if (waitpid(g_reader_pid, &st, WNOHANG) == g_reader_pid)
                die("reader process exited before polling field %ld", i);
            if (now_ns() - tw > TIMEOUT_NS) {
                g_sh->failed = 1;
                kill(g_reader_pid, SIGTERM);
                die("reader did not poll field %ld within 30 s", i);
            }
            usleep(20);
        }
        rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
        uint64_t jitter = g_sh->last_poll_ns ? rng % g_sh->last_poll_ns : 0;
        uint64_t tj = now_ns();
        while (now_ns() - tj < jitter) usleep(20);

        stamp_payload(buf, (uint64_t)i);
        fdb_key_t *key = make_key(i);
        FDB_CHECK(fdb_archive(fdb, key, (const char *)buf, (size_t)size));
        FDB_CHECK(fdb_delete_key(key));
        g_flush_start[i] = now_ns();
        FDB_CHECK(fdb_flush(fdb));
        g_flush_end[i] = now_ns();
        uint64_t t0 = now_ns();
        while (__atomic_load_n(&g_sh->seen, __ATOMIC_ACQUIRE) <= i) {
            if (g_sh->failed) exit(1);
            int st;
            if (waitpid(g_reader_pid, &st, WNOHANG) == g_reader_pid)
                die("reader process exited while waiting for field %ld", i);
            if (now_ns() - t0 > TIMEOUT_NS) {
                g_sh->failed = 1;
                kill(g_reader_pid, SIGTERM);
                die("reader did not see field %ld within 30 s", i);
            }
            usleep(20);
        }
    }
    FDB_CHECK(fdb_delete_handle(fdb));
    free(buf);
}

int main(int argc, char **argv) {
    g_prog = "fdb5_visibility";
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: %s ROOT NFIELDS [SIZE]\n", g_prog);
        return 1;
    }
    long n = parse_long(argv[2], "NFIELDS", 1);
    long size = argc == 4 ? parse_long(argv[3], "SIZE", 16) : 65536;

    fdb_setup_root(argv[1], 1);
    stdout_guard();

    size_t bytes = sizeof(shared_hdr) + 4 * (size_t)n * sizeof(uint64_t);
    void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) die("mmap: %s", strerror(errno));
    g_sh = mem;
    uint64_t *arr = (uint64_t *)((char *)mem + sizeof(shared_hdr));
    g_flush_start = arr;
    g_flush_end = arr + n;
    g_visible = arr + 2 * n;
    g_polls = arr + 3 * n;

    /* Fork before fdb_initialise: eckit state must not be shared across fork. */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) die("fork: %s", strerror(errno));
    if (pid == 0) reader(n, size);
    g_reader_pid = pid;

    uint64_t t0 = now_ns();
    writer(n, size);
    uint64_t t1 = now_ns();
    int status = 0;
    if (waitpid(pid, &status, 0) < 0) die("waitpid: %s", strerror(errno));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) die("reader process failed");

    double *vis = malloc((size_t)n * sizeof *vis), *fl = malloc((size_t)n * sizeof *fl);
    if (!vis || !fl) die("out of memory");
    double vmin = 1e300, vmax = -1e300, polls = 0;
    for (long i = 0; i < n; i++) {
        vis[i] = ((double)g_visible[i] - (double)g_flush_end[i]) / 1e3;
        fl[i] = (double)(g_flush_end[i] - g_flush_start[i]) / 1e3;
        if (vis[i] < vmin) vmin = vis[i];
        if (vis[i] > vmax) vmax = vis[i];
        polls += (double)g_polls[i];
    }
    double secs = (double)(t1 - t0) / 1e9;

    double p50 = percentile(vis, (size_t)n, 0.50), p99 = percentile(vis, (size_t)n, 0.99);
    double f50 = percentile(fl, (size_t)n, 0.50), f99 = percentile(fl, (size_t)n, 0.99);
    fprintf(g_json_out,
            "{\"peer\":\"fdb5-c-api\",\"fdb5_version\":\"%s\",\"mode\":\"visibility\","
            "\"fields\":%ld,\"size\":%ld,\"seconds\":%.6f,\"fields_per_s\":%.1f,"
            "\"p50_us\":%.1f,\"p99_us\":%.1f,\"min_us\":%.1f,\"max_us\":%.1f,"
            "\"flush_p50_us\":%.1f,\"flush_p99_us\":%.1f,\"polls_per_field\":%.2f,"
            "\"poll_new_handle_us\":%.1f,\"poll_retrieve_us\":%.1f,\"poll_errors\":%ld,"
            "\"latency\":\"flush_return_to_visible_new_handle_poll\"}\n",
            fdb5_version_string(), n, size, secs, (double)n / secs, p50, p99, vmin, vmax, f50,
            f99, polls / (double)n, g_sh->handle_us, g_sh->retrieve_us, g_sh->poll_errors);
    if (g_sh->poll_errors)
        fprintf(stderr, "fdb5_visibility: %ld poll(s) threw (treated as not visible); first: %s\n",
                g_sh->poll_errors, g_sh->first_error);
    if (fflush(g_json_out)) die("writing result: %s", strerror(errno));
    return 0;
}
