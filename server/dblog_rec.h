/* dblog_rec.h: the request log's records, inside the writer's module (dblog.c; not a public
 * header). One record per kind with its named fields: the caller's struct by value, its strings
 * (and a request's token offsets) copied into the same allocation, made on the producer's thread;
 * written by the writer thread through that kind's prepared statement (DBLOG_SQL, column order as
 * in migrations/). */
#ifndef IFL_DBLOG_REC_H
#define IFL_DBLOG_REC_H

#include <sqlite3.h>

#include "dblog.h"
#include "fifo.h"

typedef enum { REC_SESSION_OPEN = 0, REC_SESSION_CLOSE, REC_REQUEST, REC_STEP, N_REC } rec_kind;

typedef struct {
    const char *session, *reason;
    double at_ms;
} rec_session_close;

/* One record: the caller's struct by value, its strings (and the request's token offsets) copied
 * into the same allocation right after this struct. */
typedef struct rec {
    ifl_fifo_node node; /* first: the queue's link */
    rec_kind kind;
    union {
        ifl_dblog_session open;  /* REC_SESSION_OPEN */
        rec_session_close close; /* REC_SESSION_CLOSE */
        ifl_dblog_request req;   /* REC_REQUEST: n_offsets >= 0 */
        ifl_dblog_step step;     /* REC_STEP */
    } u;
} rec;

_Static_assert(sizeof(((ifl_dblog_stats *)0)->written) == N_REC * sizeof(uint64_t),
               "ifl_dblog_stats.written has one count per record kind");

enum { ST_SESSION_OPEN, ST_SESSION_CLOSE, ST_REQUEST, ST_TOKENS, ST_STEP, N_ST };
extern const char *const DBLOG_SQL[N_ST];

/* A record holding copies of everything; NULL when out of memory. Free with free(). */
rec *dblog_rec_session_open(const ifl_dblog_session *s);
rec *dblog_rec_session_close(const char *session, double at_ms, const char *reason);
rec *dblog_rec_request(const ifl_dblog_request *q);
rec *dblog_rec_step(const ifl_dblog_step *s);

/* Writes one record with the statements st (prepared from DBLOG_SQL on db). 0 written; 1 refused
 * by the database (skip it); -1 the database failed. */
int dblog_rec_write(sqlite3 *db, sqlite3_stmt *const st[N_ST], const rec *r);

#endif
