import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { budgetBytes, kernelLabel, sortKernels, summarize, summarizeState } from '../summary';
import { cull, GIB, kernel, usage } from './fixtures';

describe('summarize', () => {
  test('against the budget', () => {
    const summary = summarize(usage({ server: { gpu_memory_bytes: 17 * GIB } }));
    assert.equal(summary.text, 'GPU 17 / 20 GiB');
    assert.equal(summary.level, 'warning');
    assert.match(summary.title, /17 GiB \(85\u00a0%\) of your GPU memory budget of 20 GiB/);
  });

  test('without a budget, against the device', () => {
    const document = usage({
      budget: {
        fraction: null,
        memory_bytes: null,
        isolation: null,
        backend: null,
        profile: null,
        profile_display_name: null,
        soft_cap_bytes: null,
        error: null
      }
    });
    assert.equal(budgetBytes(document.budget), null);
    assert.equal(summarize(document).text, 'GPU 1 / 80 GiB');
  });

  test('a CPU-only budget of 0 bytes is no budget', () => {
    const document = usage();
    assert.equal(budgetBytes({ ...document.budget, memory_bytes: 0 }), null);
  });

  test('unknown per-process memory shows the whole device, marked', () => {
    const summary = summarize(
      usage({ server: { gpu_memory_bytes: null }, reason: 'Old driver in a container.' })
    );
    assert.equal(summary.text, 'GPU 3 / 80 GiB*');
    assert.match(summary.title, /Your budget is 20 GiB\. Old driver in a container\./);
  });

  test('no GPU', () => {
    const summary = summarize(usage({ available: false, gpus: [], reason: 'NVML failed.' }));
    assert.deepEqual(
      [summary.text, summary.title, summary.level],
      ['GPU \u2013', 'NVML failed.', 'unavailable']
    );
  });

  test('over budget on a shared GPU says whose memory it is', () => {
    const summary = summarize(usage({ server: { gpu_memory_bytes: 24 * GIB } }));
    assert.equal(summary.level, 'over');
    assert.match(summary.title, /120\u00a0%/);
    assert.match(
      summary.title,
      /Over budget: on a shared GPU you are now using your neighbours' memory/
    );
  });

  test('a CPU-only server has no GPU, whatever NVML would say', () => {
    const document = usage({
      available: false,
      gpus: [],
      reason: 'No GPU for this server: it was started with a CPU-only profile.'
    });
    document.budget = { ...document.budget, backend: 'none', fraction: 0, memory_bytes: 0 };
    const summary = summarize(document);
    assert.equal(summary.text, 'No GPU');
    assert.match(summary.title, /^No GPU for this server/);
    assert.equal(summary.level, 'unavailable');
  });

  test('poller states', () => {
    const idle = {
      usage: null,
      error: null,
      errorStatus: null,
      receivedAt: null,
      failingSince: null
    };
    assert.equal(summarizeState(idle).text, 'GPU …');
    const failed = summarizeState({
      usage: usage(),
      error: 'UsageRequestError: the usage API answered 500 Internal Server Error',
      errorStatus: 500,
      receivedAt: 0,
      failingSince: 1000
    });
    assert.equal(failed.level, 'unavailable');
    assert.match(failed.title, /HTTP status 500/);
    assert.doesNotMatch(failed.title, /UsageRequestError/);
  });

  test('a stopped server reads as stopped, never as a raw 424', () => {
    const stopped = summarizeState({
      usage: usage({ cull: cull() }),
      error: 'UsageRequestError: the usage API answered 424 Failed Dependency',
      errorStatus: 424,
      receivedAt: 0,
      failingSince: 239_000
    });
    assert.equal(stopped.text, 'Server stopped');
    assert.match(stopped.title, /^This server was stopped for being idle for 30 min\./);
    assert.doesNotMatch(stopped.title, /424|UsageRequestError|Failed Dependency/);
  });
});

describe('kernels', () => {
  test('labelled by notebook, then session, then kernel name', () => {
    assert.equal(kernelLabel(kernel()), 'train.ipynb');
    assert.equal(kernelLabel(kernel({ path: null, session_name: 'console' })), 'console');
    assert.equal(kernelLabel(kernel({ path: null })), 'python3 kernel 01234567');
  });

  test('sorted by label, biggest first within a label', () => {
    const sorted = sortKernels([
      kernel({ id: 'b', path: 'b.ipynb' }),
      kernel({ id: 'a-small', path: 'a.ipynb', gpu_memory_bytes: 1 }),
      kernel({ id: 'a-unknown', path: 'a.ipynb', gpu_memory_bytes: null }),
      kernel({ id: 'a-big', path: 'a.ipynb', gpu_memory_bytes: 2 })
    ]);
    assert.deepEqual(
      sorted.map(k => k.id),
      ['a-big', 'a-small', 'a-unknown', 'b']
    );
  });
});
