/*
 * fdb_c_all: every function of FDB5's C API (fdb5/api/fdb_c.h, FDB5 5.25), called as its
 * header documents them, with results checked, error paths included. Written from the
 * header's documentation only; run against haar's libfdb5.so by tests/fdb_c_api.rs.
 *
 *   fdb_c_all ROOT GRIB_FILE DEAD_PORT
 *
 * ROOT: an empty directory (a second store is made in ROOT/yaml).  GRIB_FILE: three GRIB
 * messages, levelist 1000, 850 and 500 of one field otherwise.  DEAD_PORT: a TCP port on
 * 127.0.0.1 nothing listens on.  $FDB5_CONFIG_FILE names a local TOC configuration (what
 * fdb_new_handle opens).  Prints each failed check and a summary; exit 0 only if all pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fdb5/api/fdb_c.h>

static int g_checks = 0, g_failed = 0;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        g_checks++;                                                         \
        if (!(cond)) {                                                      \
            g_failed++;                                                     \
            fprintf(stderr, "FAILED %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

/* A call that must succeed. */
#define OK(call) CHECK((call) == FDB_SUCCESS, "%s", fdb_error_string(FDB_ERROR_GENERAL_EXCEPTION))

/* A call that must fail with FDB_ERROR_GENERAL_EXCEPTION and a message holding `needle`. */
#define FAILS(call, needle)                                                              \
    do {                                                                                 \
        int before_ = g_handler_calls;                                                   \
        int rc_ = (call);                                                                \
        const char *msg_ = fdb_error_string(rc_);                                        \
        CHECK(rc_ == FDB_ERROR_GENERAL_EXCEPTION, "rc=%d", rc_);                         \
        CHECK(msg_ && strstr(msg_, needle), "message \"%s\" lacks \"%s\"", msg_ ? msg_ : "(null)", needle); \
        CHECK(g_handler_calls == before_ + 1 && g_handler_code == FDB_ERROR_GENERAL_EXCEPTION, \
              "failure handler called %d time(s), code %d", g_handler_calls - before_, g_handler_code); \
        CHECK(g_handler_context == &g_handler_calls, "handler context");                 \
    } while (0)

static int g_handler_calls = 0, g_handler_code = -1;
static void *g_handler_context = NULL;
static void on_failure(void *context, int code) {
    g_handler_calls++;
    g_handler_code = code;
    g_handler_context = context;
}

/* The database every hand-made field goes to. */
static const char *const DB[][2] = {{"class", "od"}, {"expver", "0001"}, {"stream", "oper"},
                                    {"date", "20261121"}, {"time", "1200"}, {"domain", "g"}};

static fdb_key_t *field_key(const char *step) {
    fdb_key_t *key = NULL;
    OK(fdb_new_key(&key));
    for (size_t i = 0; i < sizeof DB / sizeof DB[0]; i++) OK(fdb_key_add(key, DB[i][0], DB[i][1]));
    OK(fdb_key_add(key, "type", "fc"));
    OK(fdb_key_add(key, "levtype", "sfc"));
    OK(fdb_key_add(key, "step", step));
    OK(fdb_key_add(key, "param", "167"));
    return key;
}

/* A request for the hand-made fields at `steps` ("0", "0/to/12/by/6", ...). */
static fdb_request_t *field_request(const char *steps) {
    fdb_request_t *req = NULL;
    OK(fdb_new_request(&req));
    for (size_t i = 0; i < sizeof DB / sizeof DB[0]; i++) {
        const char *v[1] = {DB[i][1]};
        OK(fdb_request_add(req, DB[i][0], v, 1));
    }
    const char *fc[1] = {"fc"}, *sfc[1] = {"sfc"}, *param[1] = {"167"}, *step[1] = {steps};
    OK(fdb_request_add(req, "type", fc, 1));
    OK(fdb_request_add(req, "levtype", sfc, 1));
    OK(fdb_request_add(req, "step", step, 1));
    OK(fdb_request_add(req, "param", param, 1));
    return req;
}

static char g_payload[3][64];
static size_t payload(int i) {
    snprintf(g_payload[i], sizeof g_payload[i], "GRIB hand-made field %d 7777", i);
    return strlen(g_payload[i]);
}

/* Retrieves `req` into a new reader and returns how many bytes it holds (-1: failed). */
static long retrieve_size(fdb_handle_t *fdb, fdb_request_t *req) {
    fdb_datareader_t *dr = NULL;
    OK(fdb_new_datareader(&dr));
    long size = -1;
    if (fdb_retrieve(fdb, req, dr) == FDB_SUCCESS) OK(fdb_datareader_open(dr, &size));
    OK(fdb_delete_datareader(dr));
    return size;
}

/* Lists `req` to `depth`; returns the element count, checking every element's key. */
static int list_count(fdb_handle_t *fdb, fdb_request_t *req, int depth) {
    fdb_listiterator_t *it = NULL;
    OK(fdb_list(fdb, req, &it, false, depth));
    if (!it) return -1;
    fdb_split_key_t *sk = NULL;
    OK(fdb_new_splitkey(&sk));
    int n = 0, rc;
    while ((rc = fdb_listiterator_next(it)) == FDB_SUCCESS) {
        n++;
        const char *uri = NULL;
        size_t off = 99, len = 99;
        OK(fdb_listiterator_attrs(it, &uri, &off, &len));
        CHECK(uri && *uri, "uri");
        if (depth == 3) CHECK(len > 0, "len %zu", len);
        OK(fdb_listiterator_splitkey(it, sk));
        const char *k, *v, *prev = "";
        size_t level = 0, prev_level = 0, pairs = 0;
        while (fdb_splitkey_next_metadata(sk, &k, &v, &level) == FDB_SUCCESS) {
            pairs++;
            CHECK(level <= 2 && level >= prev_level, "level %zu after %zu", level, prev_level);
            if (level == prev_level) CHECK(strcmp(prev, k) < 0, "%s after %s", k, prev);
            CHECK(*v, "%s has no value", k);
            prev = k;
            prev_level = level;
        }
        CHECK(pairs >= 6, "%zu pairs", pairs);
        size_t last = depth >= 1 && depth <= 3 ? (size_t)depth - 1 : 2;
        CHECK(prev_level == last, "last level %zu at depth %d", prev_level, depth);
        /* Iteration complete stays complete. */
        CHECK(fdb_splitkey_next_metadata(sk, &k, &v, NULL) == FDB_ITERATION_COMPLETE, "complete");
    }
    CHECK(rc == FDB_ITERATION_COMPLETE, "list ended with %d", rc);
    CHECK(fdb_listiterator_next(it) == FDB_ITERATION_COMPLETE, "complete stays complete");
    OK(fdb_delete_splitkey(sk));
    OK(fdb_delete_listiterator(it));
    return n;
}

/* Runs a wipe and returns its element count (elements' strings checked non-empty). */
static int wipe_count(fdb_handle_t *fdb, fdb_request_t *req, bool doit, const char *needle) {
    fdb_wipe_iterator_t *it = NULL;
    OK(fdb_wipe(fdb, req, doit, false, false, &it));
    if (!it) return -1;
    int n = 0, rc;
    fdb_wipe_element_t *el = NULL;
    while ((rc = fdb_wipe_iterator_next(it, &el)) == FDB_SUCCESS) {
        const char *s = NULL;
        OK(fdb_wipe_element_string(el, &s));
        CHECK(s && strstr(s, needle), "wipe line \"%s\" lacks \"%s\"", s ? s : "", needle);
        OK(fdb_delete_wipe_element(el));
        n++;
    }
    CHECK(rc == FDB_ITERATION_COMPLETE, "wipe ended with %d", rc);
    OK(fdb_delete_wipe_element(el));
    OK(fdb_delete_wipe_iterator(it));
    return n;
}

static int purge_count(fdb_handle_t *fdb, fdb_request_t *req, bool doit, bool porcelain) {
    fdb_purge_iterator_t *it = NULL;
    OK(fdb_purge(fdb, req, doit, porcelain, &it));
    if (!it) return -1;
    int n = 0, rc;
    fdb_purge_element_t *el = NULL;
    while ((rc = fdb_purge_iterator_next(it, &el)) == FDB_SUCCESS) {
        const char *s = NULL;
        OK(fdb_purge_element_string(el, &s));
        CHECK(s && strstr(s, porcelain ? "fields 1" : "1 masked"), "purge line \"%s\"", s ? s : "");
        OK(fdb_delete_purge_element(el));
        n++;
    }
    CHECK(rc == FDB_ITERATION_COMPLETE, "purge ended with %d", rc);
    OK(fdb_delete_purge_element(el));
    OK(fdb_delete_purge_iterator(it));
    return n;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); exit(2); }
    static char buf[1 << 22];
    *len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return buf;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: fdb_c_all ROOT GRIB_FILE DEAD_PORT\n");
        return 2;
    }
    const char *root = argv[1];

    /* Initialisation, versions, errors. */
    OK(fdb_initialise());
    OK(fdb_initialise());
    const char *version = NULL, *sha1 = NULL;
    OK(fdb_version(&version));
    int major = 0, minor = 0, patch = 0;
    CHECK(version && sscanf(version, "%d.%d.%d", &major, &minor, &patch) == 3 && major == 5 &&
              minor >= 25,
          "version %s", version ? version : "(null)");
    OK(fdb_vcs_version(&sha1));
    CHECK(sha1 && *sha1, "vcs version");
    CHECK(!strcmp(fdb_error_string(FDB_SUCCESS), "Success"), "%s", fdb_error_string(0));
    CHECK(!strcmp(fdb_error_string(FDB_ITERATION_COMPLETE), "Iteration complete"), "complete");
    CHECK(!strcmp(fdb_error_string(99), "<unknown>"), "%s", fdb_error_string(99));
    OK(fdb_set_failure_handler(on_failure, &g_handler_calls));

    /* Keys and requests. */
    FAILS(fdb_key_add(NULL, "class", "od"), "fdb_key_t is NULL");
    fdb_key_t *key = NULL;
    OK(fdb_new_key(&key));
    FAILS(fdb_key_add(key, NULL, "od"), "param is NULL");
    FAILS(fdb_key_add(key, "class", NULL), "value is NULL");
    OK(fdb_delete_key(key));
    FAILS(fdb_key_add(key, "class", "od"), "not a live fdb_key_t");
    FAILS(fdb_delete_key(key), "not a live fdb_key_t");
    FAILS(fdb_delete_key(NULL), "NULL");

    fdb_request_t *req = NULL;
    OK(fdb_new_request(&req));
    const char *steps[2] = {"0/to/12/by/6", "24"};
    OK(fdb_request_add(req, "step", steps, 2));
    const char *lev[2] = {"1000", "850"};
    OK(fdb_request_add(req, "levelist", lev, 2));
    const char *ex[1] = {"1"};
    OK(fdb_request_add(req, "expver", ex, 1));
    OK(fdb_expand_request(req));
    char **values = NULL;
    size_t nvalues = 0;
    OK(fdb_request_get(req, "step", &values, &nvalues));
    CHECK(nvalues == 4 && values && !strcmp(values[0], "0") && !strcmp(values[1], "6") &&
              !strcmp(values[2], "12") && !strcmp(values[3], "24"),
          "step expanded to %zu value(s)", nvalues);
    for (size_t i = 0; i < nvalues; i++) free(values[i]);
    free(values);
    OK(fdb_request_get(req, "expver", &values, &nvalues));
    CHECK(nvalues == 1 && !strcmp(values[0], "0001"), "expver %s", nvalues ? values[0] : "");
    free(values[0]);
    free(values);
    OK(fdb_request_get(req, "levelist", &values, &nvalues));
    CHECK(nvalues == 2, "levelist %zu", nvalues);
    for (size_t i = 0; i < nvalues; i++) free(values[i]);
    free(values);
    FAILS(fdb_request_get(req, "param", &values, &nvalues), "no \"param\"");
    const char *bad[1] = {"x"};
    OK(fdb_request_add(req, "nosuchkeyword", bad, 1));
    FAILS(fdb_expand_request(req), "nosuchkeyword");
    FAILS(fdb_request_add(req, "step", NULL, 1), "NULL");
    OK(fdb_delete_request(req));
    FAILS(fdb_expand_request(NULL), "fdb_request_t is NULL");

    /* A handle from FDB5's own configuration ($FDB5_CONFIG_FILE). */
    fdb_handle_t *fdb = NULL;
    OK(fdb_new_handle(&fdb));
    CHECK(fdb != NULL, "handle");
    FAILS(fdb_new_handle(NULL), "fdb is NULL");

    /* Archive, flush, retrieve with the data reader. */
    for (int i = 0; i < 3; i++) {
        char step[8];
        snprintf(step, sizeof step, "%d", i * 6);
        fdb_key_t *k = field_key(step);
        OK(fdb_archive(fdb, k, g_payload[i], payload(i)));
        OK(fdb_delete_key(k));
    }
    fdb_key_t *partial = NULL;
    OK(fdb_new_key(&partial));
    OK(fdb_key_add(partial, "class", "od"));
    FAILS(fdb_archive(fdb, partial, "GRIB7777", 8), "class=od");
    FAILS(fdb_archive(fdb, partial, NULL, 8), "data is NULL");
    FAILS(fdb_archive(NULL, partial, "GRIB7777", 8), "fdb_handle_t is NULL");
    OK(fdb_delete_key(partial));
    OK(fdb_flush(fdb));
    FAILS(fdb_flush(NULL), "fdb_handle_t is NULL");

    fdb_request_t *one = field_request("6");
    fdb_datareader_t *dr = NULL;
    OK(fdb_new_datareader(&dr));
    FAILS(fdb_datareader_open(dr, NULL), "fdb_retrieve first");
    OK(fdb_retrieve(fdb, one, dr));
    char buf[256] = {0};
    long got = -1, pos = -1, size = -1, whole = (long)strlen(g_payload[1]);
    FAILS(fdb_datareader_read(dr, buf, 4, &got), "fdb_datareader_open first");
    OK(fdb_datareader_open(dr, &size));
    CHECK(size == whole, "open size %ld, want %ld", size, whole);
    size = -1;
    OK(fdb_datareader_size(dr, &size));
    CHECK(size == whole, "size %ld", size);
    OK(fdb_datareader_read(dr, buf, 4, &got));
    CHECK(got == 4 && !memcmp(buf, "GRIB", 4), "read %ld", got);
    OK(fdb_datareader_tell(dr, &pos));
    CHECK(pos == 4, "tell %ld", pos);
    OK(fdb_datareader_seek(dr, 0));
    OK(fdb_datareader_skip(dr, 5));
    OK(fdb_datareader_tell(dr, &pos));
    CHECK(pos == 5, "tell after skip %ld", pos);
    OK(fdb_datareader_read(dr, buf, sizeof buf, &got));
    CHECK(got == whole - 5 && !memcmp(buf, g_payload[1] + 5, (size_t)got), "rest %ld", got);
    OK(fdb_datareader_read(dr, buf, sizeof buf, &got));
    CHECK(got == 0, "read at end %ld", got);
    FAILS(fdb_datareader_seek(dr, -1), "outside the data");
    FAILS(fdb_datareader_skip(dr, 1), "outside the data");
    FAILS(fdb_datareader_read(dr, NULL, 4, &got), "NULL");
    OK(fdb_datareader_close(dr));
    FAILS(fdb_datareader_tell(dr, &pos), "not open");
    OK(fdb_delete_datareader(dr));
    FAILS(fdb_datareader_close(dr), "not a live fdb_datareader_t");
    OK(fdb_delete_request(one));

    fdb_request_t *range = field_request("0/to/12/by/6");
    CHECK(retrieve_size(fdb, range) == (long)(strlen(g_payload[0]) * 3), "three fields");
    OK(fdb_delete_request(range));
    /* As FDB5 ("Return all available data whose metadata matches"): absent fields are left
       out and the retrieve succeeds, with no bytes when none is there. */
    fdb_request_t *missing = field_request("0/18");
    CHECK(retrieve_size(fdb, missing) == (long)strlen(g_payload[0]), "step=0 of 0/18");
    OK(fdb_delete_request(missing));
    fdb_request_t *absent = field_request("18");
    CHECK(retrieve_size(fdb, absent) == 0, "nothing of step=18");
    OK(fdb_delete_request(absent));

    /* Listing: three fields, one database at depth 1. */
    fdb_request_t *all = field_request("0/6/12");
    CHECK(list_count(fdb, all, 3) == 3, "list of three");
    CHECK(list_count(fdb, NULL, 1) == 1, "one database");
    CHECK(list_count(fdb, all, 2) == 1, "one index");
    CHECK(list_count(fdb, all, 0) == 3, "depth 0 lists fields, as FDB5");
    fdb_listiterator_t *it = NULL;
    FAILS(fdb_list(NULL, all, &it, false, 3), "fdb_handle_t is NULL");
    OK(fdb_list(fdb, all, &it, true, 3));
    const char *uri;
    size_t off, len;
    FAILS(fdb_listiterator_attrs(it, &uri, &off, &len), "fdb_listiterator_next first");
    fdb_split_key_t *sk = NULL;
    OK(fdb_new_splitkey(&sk));
    const char *k, *v;
    FAILS(fdb_splitkey_next_metadata(sk, &k, &v, NULL), "fdb_listiterator_splitkey first");
    FAILS(fdb_listiterator_splitkey(it, sk), "fdb_listiterator_next first");
    OK(fdb_delete_splitkey(sk));
    OK(fdb_delete_listiterator(it));

    /* GRIB keyed by ecCodes. */
    size_t glen = 0;
    const char *grib = read_file(argv[2], &glen);
    OK(fdb_archive_multiple(fdb, NULL, grib, glen));
    OK(fdb_flush(fdb));
    fdb_request_t *levels = NULL;
    OK(fdb_new_request(&levels));
    const char *lv[1] = {"1000/850/500"}, *lt[1] = {"pl"}, *cl[1] = {"od"};
    OK(fdb_request_add(levels, "class", cl, 1));
    OK(fdb_request_add(levels, "levtype", lt, 1));
    OK(fdb_request_add(levels, "levelist", lv, 1));
    CHECK(list_count(fdb, levels, 3) == 3, "three GRIB fields");
    /* With a request: the messages must be exactly the fields it names. */
    OK(fdb_archive_multiple(fdb, levels, grib, glen));
    const char *lv4[1] = {"1000/850/500/300"};
    OK(fdb_request_add(levels, "levelist", lv4, 1));
    FAILS(fdb_archive_multiple(fdb, levels, grib, glen), "levelist=300");
    const char *lv1[1] = {"1000"};
    OK(fdb_request_add(levels, "levelist", lv1, 1));
    FAILS(fdb_archive_multiple(fdb, levels, grib, glen), "not among the fields the request names");
    FAILS(fdb_archive_multiple(fdb, NULL, "not grib at all", 15), "nothing archived");
    OK(fdb_flush(fdb));
    CHECK(list_count(fdb, NULL, 1) == 2, "two databases");

    /* Purge: the fields archived twice left masked copies. */
    fdb_request_t *grib_db = NULL;
    OK(fdb_new_request(&grib_db));
    OK(fdb_request_add(grib_db, "class", cl, 1));
    const char *gd[1] = {"20100912"};
    OK(fdb_request_add(grib_db, "date", gd, 1));
    fdb_key_t *again = field_key("0");
    OK(fdb_archive(fdb, again, g_payload[0], payload(0)));
    OK(fdb_delete_key(again));
    OK(fdb_flush(fdb));
    fdb_request_t *mine = field_request("0/6/12");
    CHECK(purge_count(fdb, mine, false, true) == 1, "purge dry run (porcelain)");
    CHECK(purge_count(fdb, mine, true, false) == 1, "purge");
    CHECK(purge_count(fdb, mine, true, false) == 0, "nothing left to purge");
    CHECK(list_count(fdb, mine, 3) == 3, "purge keeps live fields");

    /* Wipe: a dry run changes nothing, doit removes the GRIB database. */
    /* One line for the database, one for the fields in all. */
    CHECK(wipe_count(fdb, grib_db, false, "would be removed") == 2, "wipe dry run");
    CHECK(list_count(fdb, NULL, 1) == 2, "dry run removed nothing");
    CHECK(wipe_count(fdb, grib_db, true, "removed") == 2, "wipe");
    CHECK(list_count(fdb, NULL, 1) == 1, "GRIB database gone");
    fdb_wipe_iterator_t *wit = NULL;
    FAILS(fdb_wipe(fdb, NULL, false, false, false, &wit), "fdb_request_t is NULL");
    OK(fdb_delete_wipe_iterator(NULL));
    OK(fdb_delete_purge_iterator(NULL));
    FAILS(fdb_wipe_element_string(NULL, &uri), "fdb_wipe_element_t is NULL");
    FAILS(fdb_purge_element_string(NULL, &uri), "fdb_purge_element_t is NULL");
    fdb_purge_iterator_t *pit = NULL;
    FAILS(fdb_purge(NULL, mine, false, false, &pit), "fdb_handle_t is NULL");
    OK(fdb_delete_request(grib_db));
    OK(fdb_delete_request(levels));

    /* A handle from YAML: FDB5's local TOC configuration, then haar's own. */
    char yaml[4096];
    snprintf(yaml, sizeof yaml,
             "type: local\nengine: toc\nspaces:\n  - handler: Default\n    roots:\n      - path: %s/yaml\n",
             root);
    fdb_handle_t *other = NULL;
    OK(fdb_new_handle_from_yaml(&other, yaml, "{}"));
    CHECK(list_count(other, NULL, 3) == 0, "a fresh store is empty");
    fdb_key_t *k0 = field_key("0");
    OK(fdb_archive(other, k0, g_payload[0], payload(0)));
    OK(fdb_delete_key(k0));
    OK(fdb_delete_handle(other)); /* deleting a handle flushes it, as FDB5 */
    snprintf(yaml, sizeof yaml, "backend: posix\nroots: [%s/yaml]\n", root);
    OK(fdb_new_handle_from_yaml(&other, yaml, NULL));
    fdb_request_t *r0 = field_request("0");
    CHECK(retrieve_size(other, r0) == (long)strlen(g_payload[0]), "flushed by delete");
    OK(fdb_delete_handle(other));
    FAILS(fdb_delete_handle(other), "not a live fdb_handle_t");

    /* Bad configurations and a dead server. */
    other = NULL;
    FAILS(fdb_new_handle_from_yaml(&other, "type: local\nengine: rados\nspaces: []\n", NULL),
          "engine \"rados\"");
    FAILS(fdb_new_handle_from_yaml(&other, "nonsense_setting: 1\n", NULL), "nonsense_setting");
    FAILS(fdb_new_handle_from_yaml(&other, NULL, NULL), "system_config is NULL");
    CHECK(other == NULL, "no handle from a bad configuration");
    snprintf(yaml, sizeof yaml, "type: remote\nserver: 127.0.0.1:%s\n", argv[3]);
    char where[64];
    snprintf(where, sizeof where, "127.0.0.1:%s", argv[3]);
    if (fdb_new_handle_from_yaml(&other, yaml, NULL) == FDB_SUCCESS) {
        fdb_key_t *k1 = field_key("0");
        FAILS(fdb_archive(other, k1, g_payload[0], payload(0)), where);
        OK(fdb_delete_key(k1));
        FAILS(fdb_retrieve(other, r0, NULL), "fdb_datareader_t is NULL");
        fdb_listiterator_t *dead = NULL;
        FAILS(fdb_list(other, NULL, &dead, false, 3), where);
        fdb_delete_handle(other);
    } else {
        CHECK(strstr(fdb_error_string(FDB_ERROR_GENERAL_EXCEPTION), where) != NULL, "%s",
              fdb_error_string(FDB_ERROR_GENERAL_EXCEPTION));
    }

    /* Nothing flushed was lost to any of the failures above. */
    CHECK(retrieve_size(fdb, mine) == (long)(strlen(g_payload[0]) * 3), "still three fields");
    OK(fdb_delete_request(r0));
    OK(fdb_delete_request(mine));
    OK(fdb_delete_request(all));
    OK(fdb_delete_handle(fdb));

    OK(fdb_set_failure_handler(NULL, NULL));
    int calls = g_handler_calls;
    CHECK(fdb_delete_handle(NULL) == FDB_ERROR_GENERAL_EXCEPTION && g_handler_calls == calls,
          "handler removed");

    printf("%d checks, %d failed\n", g_checks, g_failed);
    return g_failed ? 1 : 0;
}
