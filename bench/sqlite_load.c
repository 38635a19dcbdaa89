/* The real-program workload: SQLite (the system's libsqlite3.so.0, whose
 * every function gets probed) runs a generated job and the program times
 * it itself, so a tracer's attach and detach are not counted.
 *
 *   sqlite_load ROWS
 *
 * The job, in an in-memory database: ROWS separate INSERT statements in one
 * transaction (each one parsed, planned and run, as an application would
 * issue them), then an index, a grouped aggregate and a range query whose
 * rows are all read. Prints "SECONDS ROWS CHECKSUM". */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void check(int rc, sqlite3 *db, const char *what) {
    if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW) {
        fprintf(stderr, "sqlite_load: %s: %s\n", what, sqlite3_errmsg(db));
        exit(1);
    }
}

/* Runs one statement and folds every value it returns into *sum. */
static void run(sqlite3 *db, const char *sql, unsigned long *sum) {
    sqlite3_stmt *st;
    check(sqlite3_prepare_v2(db, sql, -1, &st, NULL), db, sql);
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        for (int i = 0; i < sqlite3_column_count(st); i++) {
            const unsigned char *text = sqlite3_column_text(st, i);
            for (; text && *text; text++) *sum = *sum * 31 + *text;
        }
    }
    check(rc, db, sql);
    sqlite3_finalize(st);
}

int main(int argc, char **argv) {
    long rows = argc > 1 ? atol(argv[1]) : 20000;
    sqlite3 *db;
    check(sqlite3_open(":memory:", &db), db, "open");
    unsigned long sum = 0, seed = 7;
    char sql[256];
    double t0 = now();
    run(db, "create table t(id integer primary key, name text, v real)", &sum);
    run(db, "begin", &sum);
    for (long i = 0; i < rows; i++) {
        seed = seed * 6364136223846793005UL + 1442695040888963407UL;
        snprintf(sql, sizeof sql, "insert into t(name, v) values ('n%lu', %lu.%06lu)",
                 (seed >> 33) % 1000, (seed >> 20) % 100, (seed >> 8) % 1000000);
        run(db, sql, &sum);
    }
    run(db, "commit", &sum);
    run(db, "create index tn on t(name)", &sum);
    run(db, "select name, count(*), avg(v) from t group by name order by 2 desc, 1", &sum);
    run(db, "select id, name, v from t where v < 50 order by v", &sum);
    double t1 = now();
    sqlite3_close(db);
    printf("%.6f %ld %lu\n", t1 - t0, rows, sum);
    return 0;
}
