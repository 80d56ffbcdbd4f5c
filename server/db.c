/* db.c: opening the database and applying migrations (db.h). */
#include "db.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

double ifl_db_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int exec(sqlite3 *db, const char *sql, const char *path, const char *what, ifl_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        ifl_err_set(err, "%s: %s: %s", path, what, msg ? msg : sqlite3_errmsg(db));
        sqlite3_free(msg);
        return -1;
    }
    return 0;
}

int ifl_db_open(sqlite3 **out, const char *path, int readonly, int busy_timeout_ms, ifl_err *err)
{
    *out = NULL;
    sqlite3 *db = NULL;
    int flags = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    flags |= SQLITE_OPEN_NOMUTEX; /* each connection belongs to one thread */
    int rc = sqlite3_open_v2(path, &db, flags, NULL);
    if (rc != SQLITE_OK) {
        ifl_err_set(err, "%s: cannot open the database: %s", path,
                    db ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
        sqlite3_close(db);
        return -1;
    }
    sqlite3_busy_timeout(db, busy_timeout_ms);
    sqlite3_extended_result_codes(db, 1);
    if (!readonly && exec(db, "PRAGMA journal_mode=WAL", path, "journal_mode=WAL", err))
        goto fail;
    if (exec(db, "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON", path, "pragmas", err))
        goto fail;
    /* a file that is not a database shows up here, not at the first write */
    int v;
    if (ifl_db_version(db, &v, err))
        goto fail;
    *out = db;
    return 0;
fail:;
    int code = sqlite3_errcode(db) & 0xff;
    sqlite3_close(db);
    return code == SQLITE_NOTADB || code == SQLITE_CORRUPT ? IFL_DB_NOT_A_DATABASE : -1;
}

int ifl_db_version(sqlite3 *db, int *version, ifl_err *err)
{
    sqlite3_stmt *st = NULL;
    *version = 0;
    if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK ||
        sqlite3_step(st) != SQLITE_ROW) {
        ifl_err_set(err, "%s: cannot read the schema version: %s", sqlite3_db_filename(db, NULL),
                    sqlite3_errmsg(db));
        sqlite3_finalize(st);
        return -1;
    }
    *version = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return 0;
}

int ifl_db_migrate(sqlite3 *db, const char *path, int target, int *applied, ifl_err *err)
{
    int latest = ifl_n_migrations, v;
    if (applied)
        *applied = 0;
    if (target <= 0 || target > latest)
        target = latest;
    if (ifl_db_version(db, &v, err))
        return -1;
    if (v > latest)
        return ifl_err_set(err,
                           "%s: the database is at schema version %d, newer than this binary "
                           "knows (%d): run a newer inflight, or point --db at another file",
                           path, v, latest);
    for (int i = 0; i < latest; i++) {
        const ifl_migration *m = &ifl_migrations[i];
        if (m->version != i + 1)
            return ifl_err_set(err, "migration %s has number %d, expected %d", m->name, m->version,
                               i + 1);
        if (m->version <= v || m->version > target)
            continue;
        if (exec(db, "BEGIN IMMEDIATE", path, m->name, err))
            return -1;
        char rec[512];
        snprintf(rec, sizeof rec,
                 "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, "
                 "name TEXT NOT NULL, applied_at REAL NOT NULL);"
                 "INSERT INTO schema_migrations VALUES (%d, '%s', %.3f);"
                 "PRAGMA user_version = %d;",
                 m->version, m->name, ifl_db_now_ms(), m->version);
        if (exec(db, (const char *)m->sql, path, m->name, err) ||
            exec(db, rec, path, m->name, err) || exec(db, "COMMIT", path, m->name, err)) {
            sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
            return -1;
        }
        if (applied)
            (*applied)++;
    }
    return 0;
}
