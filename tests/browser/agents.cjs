// The agent side of the browser test, in one place: the real daemon (`gleaner-agent enroll` + `run --dedicated`).
// GLEANER_TEST_AGENT=standin plays the agent with standin_agent.py instead (the protocol from
// tests/tools/protocol_client.py around the real gleaner-worker), to tell a dashboard fault from an agent fault.
// The rest of the test watches the coordinator only, so it does not change.
'use strict';

const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');

const AGENT = process.env.GLEANER_TEST_AGENT || 'real';

// Starts one agent; returns {kind, process, log} where log is the file its output goes to.
function startAgent({ url, enrollmentToken, ca, dataDir, binaries }) {
  fs.mkdirSync(dataDir, { recursive: true });
  const log = path.join(dataDir, 'agent.log');
  const out = fs.openSync(log, 'w');
  let child;
  if (AGENT === 'real') {
    execFileSync(binaries.agent, ['enroll', url, '--token', enrollmentToken, '--ca', ca, '--data-dir', dataDir,
                                  '--name', 'browser-test-agent'],
                 { stdio: ['ignore', out, out], timeout: 30000 });
    child = spawn(binaries.agent, ['run', '--data-dir', dataDir, '--dedicated'], { stdio: ['ignore', out, out] });
  } else {
    child = spawn('python3', [path.join(__dirname, 'standin_agent.py'), '--url', url, '--token', enrollmentToken,
                              '--ca', ca, '--data-dir', dataDir, '--worker', binaries.worker, '--name', 'browser-test-agent'],
                  { stdio: ['ignore', out, out] });
  }
  fs.closeSync(out);
  return { kind: AGENT, process: child, log };
}

module.exports = { startAgent, AGENT };
