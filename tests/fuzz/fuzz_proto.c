/* fuzz_proto.c: libFuzzer target for the /ws message parser (server/protocol.c, proto_parse). One
 * input is one text message as ws.c hands it over: inputs that are not UTF-8 are dropped, as ws.c
 * closes the connection before the parser sees them. Checks (fuzz_common.h): no crash, no leak, an
 * error that can be sent as a JSON frame, and accepted messages within the documented ranges. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    if (!ifl_utf8_valid(text, size))
        return 0;
    proto_msg m;
    proto_error pe;
    int rc = proto_parse(text, size, &FUZZ_LIM, &m, &pe);
    FUZZ_CHECK(rc == 0 || rc == -1);
    if (rc) {
        fuzz_check_error(&pe);
        /* the error frame's strings, as protocol.c writes them (sb_json_str) */
        strbuf sb;
        sb_init(&sb, 0);
        sb_puts(&sb, "{\"id\":");
        if (pe.has_id)
            sb_json_str(&sb, pe.id, strlen(pe.id));
        else
            sb_puts(&sb, "null");
        sb_puts(&sb, ",\"message\":");
        sb_json_str(&sb, pe.message, strlen(pe.message));
        sb_puts(&sb, "}");
        fuzz_check_json_out(&sb);
    } else {
        FUZZ_CHECK(fuzz_escapes_ok(text, size));
        FUZZ_CHECK(!m.has_id || fuzz_str_ok(m.id, sizeof m.id));
        switch (m.kind) {
        case PROTO_GENERATE:
            FUZZ_CHECK(m.has_id && m.id[0] && !strcmp(m.gen.id, m.id));
            fuzz_check_params(&m.gen, &FUZZ_LIM, 0, 0);
            break;
        case PROTO_CANCEL: FUZZ_CHECK(m.has_id && m.id[0]); break;
        case PROTO_SUBSCRIBE:
        case PROTO_UNSUBSCRIBE: FUZZ_CHECK(!strcmp(m.topic, "steps")); break;
        case PROTO_PING: break;
        default: FUZZ_CHECK(!"a kind proto_kind does not have");
        }
        FUZZ_CHECK(m.kind == PROTO_GENERATE || !m.gen.prompt);
    }
    proto_msg_free(&m);
    return 0;
}
