import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { gpuUnusedText } from '../gpuunused';

describe('GPU-unused time', () => {
  test('seconds below a minute, then whole minutes rounded down', () => {
    assert.equal(gpuUnusedText({ seconds: 30, reason: null }), 'GPU unused for 30 s');
    assert.equal(gpuUnusedText({ seconds: 60, reason: null }), 'GPU unused for 1 min');
    assert.equal(gpuUnusedText({ seconds: 90, reason: null }), 'GPU unused for 1 min');
    assert.equal(gpuUnusedText({ seconds: 42 * 60, reason: null }), 'GPU unused for 42 min');
    assert.equal(
      gpuUnusedText({ seconds: 2 * 3600 + 330, reason: null }),
      'GPU unused for 2 h 5 min'
    );
    assert.equal(gpuUnusedText({ seconds: 3 * 3600, reason: null }), 'GPU unused for 3 h');
  });

  test('nothing after GPU work in the last window, or when the time is unknown', () => {
    assert.equal(gpuUnusedText({ seconds: 0, reason: null }), null);
    const unknown = { seconds: null, reason: 'Under MPS, GPU work runs in the MPS server.' };
    assert.equal(gpuUnusedText(unknown), null);
  });
});
