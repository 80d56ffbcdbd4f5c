/* db.h: the SQLite database of sessions, requests and timings: opening it with the settings the
 * server relies on, and the schema migrations (migrations/NNNN_*.sql, embedded in the binary by the
 * build, applied in order, each in its own transaction). What it is not: the writer thread
 * (dblog.h) or the history queries (history.h). */
#ifndef IFL_DB_H
#define IFL_DB_H

#include <sqlite3.h>

#include "error.h"

typedef struct {
    int version;              /* 1, 2, ...: the file's number */
    const char *name;         /* "0001_init.sql" */
    const unsigned char *sql; /* NUL-terminated */
} ifl_migration;

/* Generated from migrations/ (build/generated/migrations_data.c): versions 1..n in order. */
extern const ifl_migration ifl_migrations[];
extern const int ifl_n_migrations;

/* Opens (or creates, unless readonly) the database at path: WAL, synchronous=NORMAL,
 * busy_timeout, foreign keys. No migration is applied. Returns 0, or -1 (it may work later: no
 * permission, a missing directory, locked, full), or IFL_DB_NOT_A_DATABASE (the file holds
 * something else: retrying will not help). */
#define IFL_DB_NOT_A_DATABASE (-2)
int ifl_db_open(sqlite3 **out, const char *path, int readonly, int busy_timeout_ms, ifl_err *err);

/* The schema version (PRAGMA user_version; 0 for a new file). */
int ifl_db_version(sqlite3 *db, int *version, ifl_err *err);

/* Applies the migrations after the file's version up to `target` (0: the latest), each in its own
 * BEGIN IMMEDIATE transaction that also records it (user_version and the schema_migrations
 * table). A database newer than this binary is refused with a sentence saying so. *applied
 * counts those applied now. */
int ifl_db_migrate(sqlite3 *db, const char *path, int target, int *applied, ifl_err *err);

/* Wall-clock now in Unix milliseconds. */
double ifl_db_now_ms(void);

#endif
