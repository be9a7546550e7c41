import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { deviceName, softCapText } from '../wording';
import { GIB, usage } from './fixtures';

describe('soft cap', () => {
  test('the real cap and the frameworks it reaches', () => {
    const text = softCapText(usage().budget);
    assert.equal(
      text,
      '19 GiB (95\u00a0% of the budget) for PyTorch, JAX and CuPy; TensorFlow through the ' +
        'startup hook. Other code is not capped.'
    );
  });

  test('no cap where the isolation enforces the budget', () => {
    const budget = { ...usage().budget, isolation: 'hard' as const, soft_cap_bytes: null };
    assert.equal(softCapText(budget), null);
  });

  test('a shared GPU without a cap says so', () => {
    const budget = { ...usage().budget, soft_cap_bytes: null, memory_bytes: 20 * GIB };
    assert.match(softCapText(budget) ?? '', /nothing stops you/);
  });
});

describe('device names', () => {
  test('no "(simulated)" next to the badge', () => {
    assert.equal(deviceName('NVIDIA A100-SXM4-80GB (simulated)', true), 'NVIDIA A100-SXM4-80GB');
    assert.equal(deviceName('Simulated NVIDIA A100-SXM4-80GB', true), 'NVIDIA A100-SXM4-80GB');
    assert.equal(deviceName('NVIDIA A100-SXM4-80GB', false), 'NVIDIA A100-SXM4-80GB');
  });
});
