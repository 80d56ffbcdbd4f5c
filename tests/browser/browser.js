// browser.js: the Chromium the browser tests drive (chat.test.js, cors.test.js,
// long_chat.test.js): where it is ($CHROMIUM, else Debian's /usr/bin/chromium), what to do
// without it (exit 77, skipped; under CI=true exit 1, since CI must run these tests),
// playwright-core to drive it, and the launch.
'use strict';

const fs = require('fs');

const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

// Playwright's chromium launcher; or the process ends: 77 (skipped) without Chromium, 1 without
// it under CI=true or without playwright-core. log: the test's logger, for the skip line.
function chromiumOrExit(log) {
  if (!fs.existsSync(CHROMIUM)) {
    // under CI=true a missing browser is a failure: CI must run this test, not skip it
    if (/^(1|true|yes)$/i.test(process.env.CI || '')) {
      process.stderr.write(`FAIL: CI=true and no Chromium at ${CHROMIUM} (scripts/setup.sh --test installs it; ` +
        'set $CHROMIUM to use another): under CI the browser test must not skip\n');
      process.exit(1);
    }
    log(`skip: no Chromium at ${CHROMIUM} (set $CHROMIUM to use another; under CI=true this fails)`);
    process.exit(77);
  }
  try {
    return require('playwright-core').chromium;
  } catch (e) {
    process.stderr.write(`FAIL: cannot load playwright-core (${e.message}); run scripts/setup.sh (npm ci)\n`);
    process.exit(1);
  }
}

// A headless Chromium (the new headless mode), without its sandbox (which cannot start as root or
// in many containers).
function launch(chromium) {
  return chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] });
}

module.exports = { CHROMIUM, chromiumOrExit, launch };
