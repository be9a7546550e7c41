import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  budgetBytes,
  crossingMessage,
  formatBytes,
  formatFraction,
  formatGiB,
  kernelLabel,
  levelOf,
  newCrossings,
  sortKernels,
  summarize,
  summarizeState
} from '../summary';
import { GIB, kernel, usage } from './fixtures';

describe('formatting', () => {
  test('GiB with at most one decimal', () => {
    assert.equal(formatGiB(3.1 * GIB), '3.1');
    assert.equal(formatGiB(20 * GIB), '20');
    assert.equal(formatGiB(0), '0');
  });

  test('bytes pick GiB or MiB', () => {
    assert.equal(formatBytes(1.5 * GIB), '1.5 GiB');
    assert.equal(formatBytes(300 * 1024 ** 2), '300 MiB');
  });

  test('fractions read as shares of a GPU', () => {
    assert.equal(formatFraction(0.25), '1/4 GPU');
    assert.equal(formatFraction(0.125), '1/8 GPU');
    assert.equal(formatFraction(1), '1 GPU');
    assert.equal(formatFraction(2), '2 GPUs');
    assert.equal(formatFraction(0.3), '0.3 GPU');
    assert.equal(formatFraction(0), 'no GPU');
  });
});

describe('levels', () => {
  test('thresholds at 80 % and 95 %', () => {
    assert.equal(levelOf(null), 'normal');
    assert.equal(levelOf(0.79), 'normal');
    assert.equal(levelOf(0.8), 'warning');
    assert.equal(levelOf(0.95), 'critical');
  });
});

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

  test('poller states', () => {
    assert.equal(summarizeState({ usage: null, error: null }).text, 'GPU …');
    const failed = summarizeState({ usage: usage(), error: 'HTTP 500' });
    assert.equal(failed.level, 'unavailable');
    assert.match(failed.title, /HTTP 500/);
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

describe('budget crossings', () => {
  const at = (kernelBytes: number, serverBytes: number) =>
    usage({
      kernels: [kernel({ gpu_memory_bytes: kernelBytes })],
      server: { gpu_memory_bytes: serverBytes }
    });

  test('a kernel crossing 95 % is reported once, without the server', () => {
    const first = newCrossings(at(19.5 * GIB, 19.6 * GIB), new Set());
    assert.deepEqual(
      first.crossed.map(user => user.key),
      ['kernel:0123456789abcdef']
    );
    const again = newCrossings(at(19.5 * GIB, 19.6 * GIB), first.alerted);
    assert.deepEqual(again.crossed, []);
  });

  test('re-armed only below 90 %', () => {
    const first = newCrossings(at(0, 19.5 * GIB), new Set());
    assert.deepEqual(
      first.crossed.map(user => user.key),
      ['server']
    );
    const hovering = newCrossings(at(0, 18.5 * GIB), first.alerted);
    assert.ok(hovering.alerted.has('server'));
    const below = newCrossings(at(0, 10 * GIB), hovering.alerted);
    assert.equal(below.alerted.size, 0);
    assert.equal(newCrossings(at(0, 19.5 * GIB), below.alerted).crossed.length, 1);
  });

  test('nothing without a budget', () => {
    const document = at(19.5 * GIB, 19.5 * GIB);
    document.budget.memory_bytes = null;
    assert.deepEqual(newCrossings(document, new Set()).crossed, []);
  });

  test('the message fits a toast', () => {
    const [user] = newCrossings(at(19.5 * GIB, 19.6 * GIB), new Set()).crossed;
    const message = crossingMessage(user);
    assert.match(
      message,
      /^train\.ipynb uses 19\.5 GiB of GPU memory, 98\u00a0% of your 20 GiB budget/
    );
    assert.ok(message.length <= 140, message);
  });
});
