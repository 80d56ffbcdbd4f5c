/* client_demo.c: the demo's two columns: the seed's two prompts and their completions side by
 * side, wrapped to the terminal's width, redrawn on every token when stdout is a terminal (once
 * per round otherwise), each with its finish reason, token count and speed underneath. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "client.h"

static int term_width(void)
{
    struct winsize w;
    if (ioctl(1, TIOCGWINSZ, &w) == 0 && w.ws_col >= 40)
        return w.ws_col;
    return 100;
}

/* Splits text into lines of at most `width` characters (UTF-8 aware, breaks at newlines). */
static int wrap_lines(const char *s, size_t n, int width, const char **starts, size_t *lens,
                      int max_lines)
{
    int lines = 0;
    size_t i = 0;
    while (i < n && lines < max_lines) {
        size_t start = i;
        int cols = 0;
        size_t last_space = 0;
        while (i < n && s[i] != '\n' && cols < width) {
            if (s[i] == ' ')
                last_space = i;
            i++;
            while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80)
                i++;
            cols++;
        }
        if (i < n && s[i] != '\n' && last_space > start && cols >= width)
            i = last_space + 1;
        starts[lines] = s + start;
        lens[lines] = i - start;
        while (lens[lines] > 0 && (s[start + lens[lines] - 1] == '\n'))
            lens[lines]--;
        lines++;
        if (i < n && s[i] == '\n')
            i++;
    }
    return lines;
}

void client_demo_draw(client *cl, int final)
{
    if (!cl->tty && !final)
        return;
    int w = term_width(), colw = (w - 3) / 2;
    enum { MAXL = 64 };
    const char *st[2][MAXL];
    size_t ln[2][MAXL];
    int nl[2];
    const char *prompts[2] = {cl->prompt1, cl->prompt2};
    strbuf out;
    sb_init(&out, 0);
    if (cl->tty)
        sb_puts(&out, "\x1b[H\x1b[2J");
    sb_printf(&out, "inflight client: %s, round %d (Ctrl+C to stop)\n\n", cl->policy,
              cl->round + 1);
    for (int k = 0; k < 2; k++) {
        creq *r = &cl->reqs[cl->round_base + k];
        strbuf t;
        sb_init(&t, 0);
        sb_puts(&t, prompts[k]);
        if (r->text.len)
            sb_append(&t, sb_text(&r->text), r->text.len);
        nl[k] = wrap_lines(sb_text(&t) ? sb_text(&t) : "", t.len, colw, st[k], ln[k], MAXL);
        /* the wrapped lines point into t: copy them out before t goes */
        for (int i = 0; i < nl[k]; i++) {
            char *cp = malloc(ln[k][i] + 1);
            if (cp) {
                memcpy(cp, st[k][i], ln[k][i]);
                cp[ln[k][i]] = 0;
            }
            st[k][i] = cp ? cp : "";
            if (!cp)
                ln[k][i] = 0;
        }
        sb_free(&t);
    }
    int rows = nl[0] > nl[1] ? nl[0] : nl[1];
    for (int i = 0; i < rows; i++) {
        for (int k = 0; k < 2; k++) {
            size_t len = i < nl[k] ? ln[k][i] : 0;
            int cols = 0;
            for (size_t j = 0; j < len; j++)
                cols += ((unsigned char)st[k][i][j] & 0xC0) != 0x80;
            if (len)
                sb_append(&out, st[k][i], len);
            for (; cols < colw; cols++)
                sb_puts(&out, " ");
            if (!k)
                sb_puts(&out, " | ");
        }
        sb_puts(&out, "\n");
    }
    sb_puts(&out, "\n");
    for (int k = 0; k < 2; k++) {
        creq *r = &cl->reqs[cl->round_base + k];
        char info[160];
        if (r->done)
            snprintf(info, sizeof info, "%s: %d tokens, ttft %.0f ms, %.0f tok/s", r->finish,
                     r->tokens, r->ttft_ms, r->tps);
        else
            snprintf(info, sizeof info, "%s %d tokens", r->tokens ? "streaming" : "waiting",
                     r->tokens);
        sb_printf(&out, "%-*s%s", colw, info, k ? "\n" : " | ");
    }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < nl[k]; i++)
            if (ln[k][i])
                free((void *)st[k][i]);
    if (sb_ok(&out))
        fwrite(sb_text(&out), 1, out.len, stdout);
    fflush(stdout);
    sb_free(&out);
}
