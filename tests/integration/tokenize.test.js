'use strict';
// tokenize: vLLM's tokenizer endpoints (server/http_tokenize.c), on a server with --api-key:
//  - POST /tokenize of every line of the tokenizer tests' corpus (tests/tokenizer/corpus.jsonl)
//    gives the ids the JavaScript reference encoder (gpt-3-encoder) gives, count = their number,
//    max_model_len = n_ctx; POST /detokenize of those ids gives the line back byte for byte;
//  - "messages" are the chat template's text, as many tokens as /v1/chat/completions counts for
//    its prompt (add_generation_prompt: false leaves out the final "Assistant:");
//    add_special_tokens and model are accepted; ids that end inside a character decode to U+FFFD;
//  - GET /tokenizer_info: eos/bos "<|endoftext|>", pad null, model_max_length n_ctx, the template;
//  - the key (401 without it), Origin and Host (403) rules of /v1; wrong method 405;
//  - errors in OpenAI's shape naming the field: a bad id (its index and the range), wrong types,
//    unknown fields, prompt and messages both or neither, an unknown model.
const fs = require('fs');
const http = require('http');
const path = require('path');
const L = require('./lib');

const KEY = 'sk-tokenize-0123456789';
const AUTH = { authorization: `Bearer ${KEY}` };
const agent = new http.Agent({ keepAlive: true, maxSockets: 4 });

// One request; keepAlive: on the shared keep-alive agent (the corpus), else on a fresh socket (a
// refused request's connection closes after its answer).
function call(port, method, urlPath, body, headers = AUTH, keepAlive = false) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? null : Buffer.from(typeof body === 'string' ? body : JSON.stringify(body));
    const h = { ...headers };
    if (data) Object.assign(h, { 'content-type': 'application/json', 'content-length': data.length });
    const req = http.request({ host: '127.0.0.1', port, path: urlPath, method, headers: h, agent: keepAlive ? agent : false }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        const buf = Buffer.concat(chunks);
        let json = null;
        try { json = JSON.parse(buf.toString('utf8')); } catch (e) { /* not JSON */ }
        resolve({ status: res.statusCode, headers: res.headers, buf, json });
      });
      res.on('error', reject);
    });
    req.setTimeout(30000, () => req.destroy(new Error(`${method} ${urlPath}: timeout`)));
    req.on('error', reject);
    if (data) req.write(data);
    req.end();
  });
}

// A 4xx in OpenAI's shape whose param is `param` and whose message matches re.
function refused(r, status, param, re, what) {
  L.eq(r.status, status, `${what}: status (body ${r.buf.toString('utf8').slice(0, 200)})`);
  const e = r.json && r.json.error;
  L.check(e && typeof e.message === 'string' && typeof e.type === 'string' && typeof e.code === 'string',
    `${what}: not OpenAI's error shape: ${r.buf.toString('utf8').slice(0, 200)}`);
  L.eq(e.param, param, `${what}: error.param`);
  L.check(re.test(e.message), `${what}: message ${JSON.stringify(e.message)} does not match ${re}`);
}

async function corpusRoundTrip(port, encode, nCtx) {
  const lines = fs.readFileSync(path.join(L.REPO, 'tests', 'tokenizer', 'corpus.jsonl'), 'utf8')
    .split('\n').filter((l) => l.length);
  const texts = lines.map((l) => JSON.parse(l)).filter((s) => Buffer.from(s, 'utf8').toString('utf8') === s);
  L.check(texts.length > 1000, `only ${texts.length} corpus lines are well-formed text`);
  let tokens = 0;
  const one = async (s, i) => {
    const t = await call(port, 'POST', '/tokenize', { prompt: s }, AUTH, true);
    L.eq(t.status, 200, `corpus line ${i}: /tokenize status (${t.buf.toString('utf8').slice(0, 200)})`);
    L.eq(JSON.stringify(t.json.tokens), JSON.stringify(encode(s)), `corpus line ${i} ${JSON.stringify(s.slice(0, 60))}: ids vs gpt-3-encoder`);
    L.eq(t.json.count, t.json.tokens.length, `corpus line ${i}: count`);
    L.eq(t.json.max_model_len, nCtx, `corpus line ${i}: max_model_len`);
    const d = await call(port, 'POST', '/detokenize', { tokens: t.json.tokens }, AUTH, true);
    L.eq(d.status, 200, `corpus line ${i}: /detokenize status`);
    L.check(Buffer.from(d.json.prompt, 'utf8').equals(Buffer.from(s, 'utf8')),
      `corpus line ${i}: detokenize(tokenize(x)) != x: ${JSON.stringify(d.json.prompt.slice(0, 80))}`);
    tokens += t.json.count;
  };
  for (let i = 0; i < texts.length; i += 8)
    await Promise.all(texts.slice(i, i + 8).map((s, k) => one(s, i + k)));
  L.log(`ok  ${texts.length} corpus lines (${tokens} tokens): the reference ids, round-tripped byte for byte`);
}

async function chat(port, encode) {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello there' },
    { role: 'assistant', content: ' Hi.' }, { role: 'user', content: [{ type: 'text', text: 'Why?' }] }];
  const text = 'System: Be brief.\nUser: Hello there\nAssistant: Hi.\nUser: Why?\n';
  const t = await call(port, 'POST', '/tokenize', { model: 'iterative', messages, add_special_tokens: false });
  L.eq(t.status, 200, `messages: status ${t.buf.toString('utf8').slice(0, 200)}`);
  L.eq(JSON.stringify(t.json.tokens), JSON.stringify(encode(`${text}Assistant:`)), 'messages: the chat template\'s ids');
  const c = await call(port, 'POST', '/v1/chat/completions', { model: 'iterative', messages, max_tokens: 1 });
  L.eq(c.status, 200, '/v1/chat/completions status');
  L.eq(t.json.count, c.json.usage.prompt_tokens, 'messages: count vs /v1/chat/completions usage.prompt_tokens');
  const n = await call(port, 'POST', '/tokenize', { messages, add_generation_prompt: false });
  L.eq(JSON.stringify(n.json.tokens), JSON.stringify(encode(text)), 'add_generation_prompt false: without "Assistant:"');
  const a = await call(port, 'POST', '/tokenize', { prompt: 'a <|endoftext|> b', add_special_tokens: true });
  L.eq(JSON.stringify(a.json.tokens), JSON.stringify(encode('a <|endoftext|> b')), '"<|endoftext|>" in a prompt is plain text');
  const e = await call(port, 'POST', '/tokenize', { prompt: '' });
  L.eq(JSON.stringify(e.json), JSON.stringify({ count: 0, max_model_len: e.json.max_model_len, tokens: [] }), 'an empty prompt');
  L.eq((await call(port, 'POST', '/detokenize', { tokens: [] })).json.prompt, '', 'no ids');
  const ids = encode('\u{10348}'); // four bytes, one per token
  L.check(ids.length > 1, `"\u{10348}" is ${ids.length} token(s)`);
  const cut = await call(port, 'POST', '/detokenize', { tokens: ids.slice(0, 2) });
  L.eq(cut.json.prompt, '\ufffd', 'an id that ends inside a character');
  L.log('ok  messages (as /v1/chat/completions counts them), add_generation_prompt, special text, empty, U+FFFD');
}

async function info(port, nCtx) {
  const r = await call(port, 'GET', '/tokenizer_info');
  L.eq(r.status, 200, '/tokenizer_info status');
  const j = r.json;
  L.eq(j.eos_token, '<|endoftext|>', 'eos_token');
  L.eq(j.bos_token, '<|endoftext|>', 'bos_token');
  L.eq(j.pad_token, null, 'pad_token (GPT-2 has none)');
  L.eq(j.model_max_length, nCtx, 'model_max_length');
  L.check(typeof j.chat_template === 'string' && j.chat_template.includes('Assistant:'), `chat_template ${JSON.stringify(j.chat_template)}`);
  L.eq((await call(port, 'HEAD', '/tokenizer_info')).status, 200, 'HEAD /tokenizer_info');
  L.log(`ok  /tokenizer_info ${JSON.stringify({ ...j, chat_template: '...' })}`);
}

async function rules(port) {
  for (const [m, p, b] of [['POST', '/tokenize', { prompt: 'x' }], ['POST', '/detokenize', { tokens: [1] }], ['GET', '/tokenizer_info']]) {
    refused(await call(port, m, p, b, {}), 401, null, /API key/, `${m} ${p} without the key`);
    refused(await call(port, m, p, b, { authorization: 'Bearer wrong-key-0000' }), 401, null, /API key/, `${m} ${p} with a wrong key`);
  }
  refused(await call(port, 'POST', '/tokenize', { prompt: 'x' }, { ...AUTH, origin: 'http://evil.example' }), 403, null,
    /origin/, 'POST /tokenize from another origin');
  refused(await call(port, 'POST', '/tokenize', { prompt: 'x' }, { ...AUTH, host: 'evil.example' }), 403, null,
    /Host/, 'POST /tokenize with a foreign Host');
  const g = await call(port, 'GET', '/tokenize');
  L.eq(g.status, 405, 'GET /tokenize');
  L.eq(g.headers.allow, 'POST', 'GET /tokenize: Allow');
  L.log('ok  401 without the key, 403 for a foreign Origin or Host, 405 for GET');
}

async function errors(port) {
  const tok = (b) => call(port, 'POST', '/tokenize', b);
  const detok = (b) => call(port, 'POST', '/detokenize', b);
  refused(await detok({ tokens: [15496, 11, 995, 50257] }), 400, 'tokens[3]',
    /^tokens\[3\] is 50257: a token id must be from 0 to 50256$/, 'an id past the vocabulary');
  refused(await detok({ tokens: [-1] }), 400, 'tokens[0]', /tokens\[0\] is -1/, 'a negative id');
  refused(await detok({ tokens: [1, 2.5] }), 400, 'tokens[1]', /integer/, 'a fraction');
  refused(await detok({ tokens: [1, '2'] }), 400, 'tokens[1]', /not a string/, 'a string id');
  refused(await detok({ tokens: 'hello' }), 400, 'tokens', /array/, 'tokens a string');
  refused(await detok({}), 400, 'tokens', /required/, 'no tokens');
  refused(await detok({ tokens: [1], skip_special_tokens: true }), 400, 'skip_special_tokens', /unknown field/, 'detokenize: an unknown field');
  refused(await tok({ prompt: 5 }), 400, 'prompt', /must be a string/, 'prompt a number');
  refused(await tok({ prompt: 'x', add_special_tokens: 'yes' }), 400, 'add_special_tokens', /boolean/, 'add_special_tokens a string');
  refused(await tok({ prompt: 'x', temperature: 1 }), 400, 'temperature', /unknown field 'temperature'/, 'tokenize: an unknown field');
  refused(await tok({ prompt: 'x', messages: [{ role: 'user', content: 'x' }] }), 400, 'messages', /not both/, 'prompt and messages');
  refused(await tok({}), 400, 'prompt', /needs 'prompt'/, 'neither prompt nor messages');
  refused(await tok({ messages: [{ role: 'robot', content: 'x' }] }), 400, 'messages[0].role', /role/, 'a bad role');
  refused(await tok({ prompt: 'x', model: 'gpt-9' }), 404, 'model', /does not exist/, 'an unknown model');
  refused(await tok({ prompt: 'x', model: 7 }), 400, 'model', /string/, 'model a number');
  refused(await call(port, 'POST', '/tokenize', '{"prompt": '), 400, null, /./, 'broken JSON');
  L.log('ok  errors name the field (tokens[3] is 50257: ...), wrong types, unknown fields');
}

L.main('tokenize', async () => {
  const { bin, vocab } = L.parseArgs();
  const { encode } = require(vocab);
  const model = L.makeModel(bin, vocab);
  const srv = await L.startServer(bin, vocab, model, ['--no-request-log', '--api-key', KEY]);
  const meta = await call(srv.port, 'GET', '/v2/models/iterative-gpt2');
  const nCtx = meta.json && meta.json.parameters && meta.json.parameters.n_ctx;
  L.check(Number.isInteger(nCtx) && nCtx > 0, `n_ctx from /v2's config: ${meta.buf.toString('utf8').slice(0, 300)}`);
  await rules(srv.port);
  await errors(srv.port);
  await info(srv.port, nCtx);
  await chat(srv.port, encode);
  await corpusRoundTrip(srv.port, encode, nCtx);
  agent.destroy();
});
