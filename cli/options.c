/* options.c: cli_parse (options.h): a command's option table read with getopt_long, the values
 * checked against the table's types and ranges, the defaults set and --help written from it. */
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "options.h"

#include "params.h"

#define HELP_COLUMN 26 /* where the help text of an option starts */
#define HELP_WIDTH 100 /* the help's lines are wrapped at this column */

/* The index of word w among the '|'-separated words, or -1. */
static int word_index(const char *words, const char *w)
{
    size_t n = strlen(w);
    int i = 0;
    for (const char *p = words;; i++) {
        size_t len = strcspn(p, "|");
        if (len == n && !strncmp(p, w, n))
            return i;
        if (!p[len])
            return -1;
        p += len + 1;
    }
}

/* "--device must be auto, cpu or cuda, not 'tpu'" */
static int word_error(const cli_spec *s, const cli_opt *o, const char *arg)
{
    fprintf(stderr, "inflight %s: --%s must be ", s->cmd, o->name);
    for (const char *p = o->words; *p;) {
        size_t len = strcspn(p, "|");
        const char *after = p[len] ? p + len + 1 : p + len;
        fprintf(stderr, "%.*s%s", (int)len, p, !*after ? "" : strchr(after, '|') ? ", " : " or ");
        p = after;
    }
    fprintf(stderr, ", not '%s' (see 'inflight %s --help')\n", arg, s->cmd);
    return -1;
}

/* The parameter-table row (params.h) of a CLI_FROM_REQUEST option: its name with '_' for '-';
 * NULL for other options. */
static const param_def *request_param(const cli_opt *o)
{
    char name[64];
    if (!(o->flags & CLI_FROM_REQUEST) || strlen(o->name) >= sizeof name)
        return NULL;
    for (size_t i = 0; (name[i] = o->name[i] == '-' ? '_' : o->name[i]); i++)
        ;
    return params_find(name, PARAM_API_WS);
}

/* Option o as parsed: a request parameter with fixed bounds in the table takes them (a bound the
 * server sets, max_tokens' or top_k's, stays the command's own). */
static cli_opt effective(const cli_opt *o)
{
    cli_opt r = *o;
    const param_def *d = request_param(o);
    if (d && d->hi_from == PARAM_FIXED) {
        r.lo = d->lo;
        r.hi = d->hi;
        if (d->lo_open)
            r.flags |= CLI_LO_OPEN;
    }
    return r;
}

/* Parses arg into the field of option o; -1 after printing what is wrong. */
static int set_value(const cli_spec *s, const cli_opt *row, const char *arg, char *dst)
{
    const cli_opt eff = effective(row), *o = &eff;
    void *f = dst + o->off;
    const char *cmd = s->cmd;
    char opt[96];
    snprintf(opt, sizeof opt, "--%s", o->name);
    switch (o->type) {
    case CLI_HEADING:
    case CLI_MODE: return 0;
    case CLI_FLAG: *(int *)f = 1; return 0;
    case CLI_FLAG_OFF: *(int *)f = 0; return 0;
    case CLI_STR: *(const char **)f = arg; return 0;
    case CLI_WORD:
    case CLI_INDEX: {
        int i = word_index(o->words, arg);
        if (i < 0)
            return word_error(s, o, arg);
        if (o->type == CLI_WORD)
            *(const char **)f = arg;
        else
            *(int *)f = i;
        return 0;
    }
    case CLI_I32: return cli_i32(cmd, opt, arg, (int32_t)o->lo, (int32_t)o->hi, f);
    case CLI_U64: return cli_u64(cmd, opt, arg, f);
    case CLI_I64: {
        uint64_t v;
        uint64_t hi = o->hi > 0 ? (uint64_t)o->hi : (uint64_t)INT64_MAX;
        if (cli_u64(cmd, opt, arg, &v))
            return -1;
        if (v < (uint64_t)o->lo || v > hi) {
            fprintf(stderr, "inflight %s: %s: '%s' is not an integer in [%.0f, %llu]\n", cmd, opt,
                    arg, o->lo, (unsigned long long)hi);
            return -1;
        }
        *(int64_t *)f = (int64_t)v;
        return 0;
    }
    case CLI_F64: {
        double v;
        if (cli_f64(cmd, opt, arg, o->lo, o->hi, &v))
            return -1;
        if ((o->flags & CLI_LO_OPEN) && v <= o->lo) {
            fprintf(stderr, "inflight %s: %s: '%s' is not a number in (%g, %g]\n", cmd, opt, arg,
                    o->lo, o->hi);
            return -1;
        }
        *(double *)f = v;
        return 0;
    }
    case CLI_CUSTOM: return o->parse(cmd, arg, f);
    }
    return -1;
}

/* The default of option o as dst holds it ("" for none). */
static void format_default(const cli_opt *o, const char *dst, char *out, size_t cap)
{
    const void *f = dst + o->off;
    out[0] = 0;
    if (o->def_text || (o->type == CLI_CUSTOM && o->def)) {
        snprintf(out, cap, "%s", o->def_text ? o->def_text : o->def);
        return;
    }
    switch (o->type) {
    case CLI_STR:
    case CLI_WORD: {
        const char *v = *(const char *const *)f;
        if (v)
            snprintf(out, cap, strchr(v, ' ') ? "\"%s\"" : "%s", v);
        break;
    }
    case CLI_INDEX: {
        const char *p = o->words;
        for (int i = *(const int *)f; i > 0 && strchr(p, '|'); i--)
            p = strchr(p, '|') + 1;
        snprintf(out, cap, "%.*s", (int)strcspn(p, "|"), p);
        break;
    }
    case CLI_I32: snprintf(out, cap, "%d", *(const int32_t *)f); break;
    case CLI_I64: snprintf(out, cap, "%lld", (long long)*(const int64_t *)f); break;
    case CLI_U64: snprintf(out, cap, "%llu", (unsigned long long)*(const uint64_t *)f); break;
    case CLI_F64: snprintf(out, cap, "%g", *(const double *)f); break;
    default: break;
    }
}

/* Writes text from column col, wrapped at HELP_WIDTH, continuation lines at HELP_COLUMN. */
static void print_wrapped(FILE *out, const char *text, int col)
{
    const char *p = text;
    while (*p) {
        int room = HELP_WIDTH - col;
        size_t len = strlen(p);
        if ((int)len > room) {
            len = (size_t)room;
            while (len > 0 && p[len] != ' ')
                len--;
            if (len == 0)
                len = strcspn(p, " ");
        }
        fprintf(out, "%.*s\n", (int)len, p);
        p += len;
        while (*p == ' ')
            p++;
        if (*p)
            fprintf(out, "%*s", HELP_COLUMN, "");
        col = HELP_COLUMN;
    }
}

static void print_help(const cli_spec *s, const char *defaults)
{
    fputs(s->usage, stdout);
    for (size_t i = 0; i < s->n_opts; i++) {
        const cli_opt *o = &s->opts[i];
        if (o->type == CLI_HEADING) {
            printf("%s\n", o->help);
            continue;
        }
        char head[160], def[160], text[1200], letter[8] = "", dyn_arg[96], dyn_help[800];
        const char *arg = o->arg ? o->arg : o->words, *help = o->help;
        if (o->describe) {
            o->describe(dyn_arg, sizeof dyn_arg, dyn_help, sizeof dyn_help);
            arg = dyn_arg;
            help = dyn_help;
        }
        int optional = arg && (o->flags & CLI_OPTIONAL_ARG);
        if (o->letter)
            snprintf(letter, sizeof letter, "-%c, ", o->letter);
        int n = snprintf(head, sizeof head, "  %s--%s%s%s%s", letter, o->name,
                         optional ? "[="
                         : arg    ? " "
                                  : "",
                         arg ? arg : "", optional ? "]" : "");
        format_default(o, defaults, def, sizeof def);
        snprintf(text, sizeof text, "%s%s%s%s", help, def[0] ? " (default " : "", def,
                 def[0] ? ")" : "");
        fputs(head, stdout);
        if (n >= HELP_COLUMN - 1) {
            printf("\n%*s", HELP_COLUMN, "");
            n = HELP_COLUMN;
        } else {
            printf("%*s", HELP_COLUMN - n, "");
        }
        print_wrapped(stdout, text, HELP_COLUMN);
    }
}

/* getopt_long's table and short options for spec (+ --help, -h); NULL when out of memory. */
static struct option *getopt_table(const cli_spec *s, char *shorts, size_t cap)
{
    struct option *t = calloc(s->n_opts + 2, sizeof *t);
    size_t k = 0, ns = 0;
    if (!t)
        return NULL;
    shorts[ns++] = ':';
    for (size_t i = 0; i < s->n_opts; i++) {
        const cli_opt *o = &s->opts[i];
        if (o->type == CLI_HEADING)
            continue;
        int has_arg = o->type == CLI_MODE || o->type == CLI_FLAG || o->type == CLI_FLAG_OFF
                          ? no_argument
                      : (o->flags & CLI_OPTIONAL_ARG) ? optional_argument
                                                      : required_argument;
        t[k++] = (struct option){o->name, has_arg, NULL, 256 + (int)i};
        if (o->letter && ns + 3 < cap) {
            shorts[ns++] = o->letter;
            for (int c = 0; c < has_arg; c++)
                shorts[ns++] = ':';
        }
    }
    t[k] = (struct option){"help", no_argument, NULL, 'h'};
    shorts[ns++] = 'h';
    shorts[ns] = 0;
    return t;
}

/* The row of a getopt_long result: a long option's index + 256, or a short letter. */
static const cli_opt *find_row(const cli_spec *s, int c)
{
    if (c >= 256 && (size_t)(c - 256) < s->n_opts)
        return &s->opts[c - 256];
    for (size_t i = 0; i < s->n_opts; i++)
        if (s->opts[i].letter && s->opts[i].letter == c)
            return &s->opts[i];
    return NULL;
}

static int usage_error(const cli_spec *s, const char *what, const char *hint)
{
    char msg[300];
    snprintf(msg, sizeof msg, "%s%s%s%s", what, hint ? " (" : "", hint ? hint : "",
             hint ? ")" : "");
    return cli_usage_error(s->cmd, msg);
}

/* The table's defaults (def) into dst; -1 (a bug in a table) after saying which. */
static int set_defaults(const cli_spec *s, char *dst)
{
    for (size_t i = 0; i < s->n_opts; i++) {
        const cli_opt *o = &s->opts[i];
        const param_def *d = request_param(o);
        if (d && d->def_from == PARAM_FIXED && o->type == CLI_F64) /* the table's own default */
            *(double *)(dst + o->off) = d->def;
        else if (d && d->def_from == PARAM_FIXED && o->type == CLI_I32)
            *(int32_t *)(dst + o->off) = (int32_t)d->def;
        if (o->def && (o->type == CLI_FLAG || o->type == CLI_FLAG_OFF))
            *(int *)(dst + o->off) = atoi(o->def); /* "1": on unless the flag says otherwise */
        else if (o->def && set_value(s, o, o->def, dst)) {
            fprintf(stderr, "inflight %s: the default of --%s is bad\n", s->cmd, o->name);
            return -1;
        }
    }
    return 0;
}

int cli_parse(const cli_spec *s, int argc, char **argv, int first, void *dst, size_t dst_size)
{
    char shorts[128];
    char *defaults = malloc(dst_size);
    struct option *t = getopt_table(s, shorts, sizeof shorts);
    int rc = -1, c;
    if (!t || !defaults) {
        fprintf(stderr, "inflight %s: out of memory\n", s->cmd);
        rc = 1;
        goto out;
    }
    if (set_defaults(s, dst)) {
        rc = 1;
        goto out;
    }
    memcpy(defaults, dst, dst_size);
    optind = first;
    opterr = 0;
    while (rc < 0 && (c = getopt_long(argc, argv, shorts, t, NULL)) != -1) {
        const cli_opt *o = find_row(s, c);
        if (c == 'h' && !o) {
            print_help(s, defaults);
            rc = 0;
        } else if (c == ':') {
            rc = usage_error(s, "an option is missing its value", NULL);
        } else if (!o) {
            rc = usage_error(s, "unknown option", s->unknown_hint);
        } else if ((optarg || !(o->flags & CLI_OPTIONAL_ARG)) && set_value(s, o, optarg, dst)) {
            rc = 2;
        }
    }
    if (rc < 0 && optind < argc)
        rc = usage_error(s, "unexpected argument", s->extra_hint);
out:
    free(t);
    free(defaults);
    return rc;
}
