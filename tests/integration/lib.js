'use strict';
// lib.js: the shared helpers of the integration tests (tests/integration/*.test.js, and the db,
// deploy and docker tests that build on them), in one module. Each test is a standalone program
// `node <test> <inflight-binary> <vocab-dir>` that starts the real `inflight serve` on a free loopback
// port with a generated model and drives it with real WebSocket clients. The helpers live in:
//   harness.js    assertions, logging, waiting, the cleanup registry and main() (the test runner)
//   server.js     arguments, models, starting/stopping the server, HTTP, /metrics
//   ws_client.js  the recording WebSocket client, frame-order checks, hand-built WebSocket frames

module.exports = {
  ...require('./harness'),
  ...require('./server'),
  ...require('./ws_client'),
};
