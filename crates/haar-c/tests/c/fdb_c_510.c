/*
 * fdb_c_510: FDB5 5.10's listing API (Debian 12's libfdb5-dev header): archives three
 * fields through $FDB5_CONFIG_FILE, flushes, archives the first key again and flushes, lists
 * them with fdb_new_listiterator / fdb_list(fdb, req, it) / fdb_listiterator_next(it, &exist,
 * &str) and prints each string, one a line: four, as 5.10's fdb_list does not deduplicate
 * (the masked copy is listed too). Run against Debian's libfdb5.so and against haar's built with the feature
 * fdb5-5_10 by tests/fdb_v5_10.rs, which compares the output.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include <fdb5/api/fdb_c.h>

#define CHECK(call)                                                                  \
    do {                                                                             \
        int rc_ = (call);                                                            \
        if (rc_ != FDB_SUCCESS) {                                                    \
            fprintf(stderr, "%s failed (rc=%d): %s\n", #call, rc_, fdb_error_string(rc_)); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

int main(void) {
    CHECK(fdb_initialise());
    fdb_handle_t *fdb = NULL;
    CHECK(fdb_new_handle(&fdb));
    const char *steps[4] = {"0", "6", "12", "0"};
    for (int i = 0; i < 4; i++) {
        if (i == 3) CHECK(fdb_flush(fdb)); /* the first key again, in a later index */
        fdb_key_t *key = NULL;
        CHECK(fdb_new_key(&key));
        CHECK(fdb_key_add(key, "class", "od"));
        CHECK(fdb_key_add(key, "expver", "0001"));
        CHECK(fdb_key_add(key, "stream", "oper"));
        CHECK(fdb_key_add(key, "date", "20261121"));
        CHECK(fdb_key_add(key, "time", "1200"));
        CHECK(fdb_key_add(key, "domain", "g"));
        CHECK(fdb_key_add(key, "type", "fc"));
        CHECK(fdb_key_add(key, "levtype", "sfc"));
        CHECK(fdb_key_add(key, "step", steps[i]));
        CHECK(fdb_key_add(key, "param", "167"));
        CHECK(fdb_archive(fdb, key, "GRIB 5.10 field 7777", 20));
        CHECK(fdb_delete_key(key));
    }
    CHECK(fdb_flush(fdb));

    fdb_request_t *req = NULL;
    CHECK(fdb_new_request(&req));
    const char *od[1] = {"od"};
    CHECK(fdb_request_add(req, "class", od, 1));
    fdb_listiterator_t *it = NULL;
    CHECK(fdb_new_listiterator(&it));
    CHECK(fdb_list(fdb, req, it));
    bool exist = true;
    const char *str = NULL;
    int n = 0;
    for (;;) {
        CHECK(fdb_listiterator_next(it, &exist, &str));
        if (!exist) break;
        printf("%s\n", str);
        n++;
    }
    CHECK(fdb_delete_listiterator(it));
    CHECK(fdb_delete_request(req));
    CHECK(fdb_delete_handle(fdb));
    return n == 4 ? 0 : 1;
}
