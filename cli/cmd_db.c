/* cmd_db.c: `inflight db migrate|status --db PATH`: the request log's schema for operators. The
 * migrations are the ones embedded in this binary (migrations/ at build time). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "db.h"

static const char *const USAGE =
    "usage: inflight db status --db PATH\n"
    "       inflight db migrate --db PATH [--to N]\n"
    "\n"
    "status   the file's schema version, the migrations this binary has, which are applied and\n"
    "         when, and the row counts of the tables\n"
    "migrate  apply the pending migrations in order, each in its own transaction. A database\n"
    "         newer than this binary is refused.\n"
    "\n";

typedef struct {
    const char *path;
    int32_t to;
} db_opts;

static const cli_opt OPTS[] = {
    CLI_ROW("db", 0, CLI_STR, "PATH", 0, 0, db_opts, path, "the SQLite file of the request log"),
    {.name = "to",
     .type = CLI_I32,
     .arg = "N",
     .lo = 1,
     .hi = 1 << 20,
     .def_text = "the last",
     .off = offsetof(db_opts, to),
     .help = "migrate: stop after version N"},
};

static int print_status(sqlite3 *db, const char *path)
{
    ifl_err err;
    int v;
    if (ifl_db_version(db, &v, &err)) {
        fprintf(stderr, "inflight db: %s\n", err.msg);
        return 1;
    }
    printf("%s: schema version %d; this binary has %d migration(s)%s\n", path, v, ifl_n_migrations,
           v > ifl_n_migrations   ? " (the database is NEWER than this binary)"
           : v < ifl_n_migrations ? " (pending: run inflight db migrate)"
                                  : " (up to date)");
    for (int i = 0; i < ifl_n_migrations; i++) {
        const ifl_migration *m = &ifl_migrations[i];
        char when[64] = "pending";
        sqlite3_stmt *st = NULL;
        if (m->version <= v &&
            sqlite3_prepare_v2(db,
                               "SELECT strftime('%Y-%m-%d %H:%M:%S', applied_at / 1000, "
                               "'unixepoch') FROM schema_migrations WHERE version = ?1",
                               -1, &st, NULL) == SQLITE_OK) {
            sqlite3_bind_int(st, 1, m->version);
            if (sqlite3_step(st) == SQLITE_ROW)
                snprintf(when, sizeof when, "applied %s UTC", sqlite3_column_text(st, 0));
        }
        sqlite3_finalize(st);
        printf("  %04d %-28s %s\n", m->version, m->name, when);
    }
    static const char *const tables[] = {"sessions", "requests", "request_tokens", "steps"};
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        char sql[96];
        snprintf(sql, sizeof sql, "SELECT count(*) FROM %s", tables[i]);
        sqlite3_stmt *st = NULL;
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
            sqlite3_step(st) == SQLITE_ROW)
            printf("  %-15s %lld rows\n", tables[i], (long long)sqlite3_column_int64(st, 0));
        sqlite3_finalize(st);
    }
    return 0;
}

int cmd_db(int argc, char **argv)
{
    static const cli_spec spec = CLI_SPEC("db", USAGE, OPTS, NULL, NULL);
    const char *cmd = spec.cmd;
    db_opts o = {0};
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
        return cli_parse(&spec, 2, (char *[]){argv[0], "--help", NULL}, 1, &o, sizeof o);
    if (argc < 2 || (strcmp(argv[1], "migrate") && strcmp(argv[1], "status")))
        return cli_usage_error(cmd, "expected 'migrate' or 'status'");
    const char *action = argv[1];
    int st = cli_parse(&spec, argc, argv, 2, &o, sizeof o);
    if (st >= 0)
        return st;
    const char *path = o.path;
    int32_t to = o.to;
    if (!path)
        return cli_usage_error(cmd, "--db PATH is required");
    int is_status = !strcmp(action, "status");
    if (to > ifl_n_migrations) {
        fprintf(stderr, "inflight db: --to %d: this binary has migrations 1 to %d\n", to,
                ifl_n_migrations);
        return 2;
    }
    sqlite3 *db = NULL;
    ifl_err err;
    if (ifl_db_open(&db, path, is_status, 5000, &err)) {
        fprintf(stderr, "inflight db: %s\n", err.msg);
        return 1;
    }
    int rc = 0;
    if (is_status) {
        rc = print_status(db, path);
    } else {
        int before = 0, applied = 0;
        if (ifl_db_version(db, &before, &err) || ifl_db_migrate(db, path, to, &applied, &err)) {
            fprintf(stderr, "inflight db: %s\n", err.msg);
            rc = 1;
        } else {
            int after = before;
            ifl_db_version(db, &after, &err);
            printf("%s: schema version %d -> %d (%d migration(s) applied)%s\n", path, before, after,
                   applied,
                   to && before > to ? "; migrations are never reversed: it stays newer than --to"
                                     : "");
        }
    }
    sqlite3_close(db);
    return rc;
}
