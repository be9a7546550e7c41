import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import type { Session } from '@jupyterlab/services';

import type { IRestoreReport, ISavedState } from '../hibernation-api';
import { restoreResult, statesToOffer } from '../offers';

function state(overrides: Partial<ISavedState> = {}): ISavedState {
  return {
    key: '0123456789abcdef0123456789abcdef',
    path: 'train.ipynb',
    notebook_file: '/home/jovyan/train.ipynb',
    saved_at: '2026-11-25T14:05:00+00:00',
    bytes: 3 * 1024 ** 3,
    device_bytes: 0,
    variables: ['model', 'frame'],
    skipped: [],
    versions: { python: '3.11.7' },
    restored_at: null,
    problem: null,
    ...overrides
  };
}

function session(path: string, kernelId: string | null): Session.IModel {
  return {
    id: `session-${path}`,
    name: path,
    path,
    type: 'notebook',
    kernel: kernelId === null ? null : { id: kernelId, name: 'python3' }
  };
}

describe('restore offers', () => {
  test('a saved state is offered once per new kernel of its notebook', () => {
    const offered = new Set<string>();
    const sessions = [session('train.ipynb', 'k1'), session('other.ipynb', 'k2')];
    const first = statesToOffer([state()], sessions, offered);
    assert.deepEqual(
      first.map(o => o.kernelId),
      ['k1']
    );
    offered.add(`${first[0].state.key} k1`);
    assert.deepEqual(statesToOffer([state()], sessions, offered), []);
    const restarted = [session('train.ipynb', 'k3')];
    assert.equal(statesToOffer([state()], restarted, offered).length, 1);
  });

  test('no offer for a restored or unusable state, nor for a notebook without a kernel', () => {
    const sessions = [session('train.ipynb', 'k1')];
    const none = new Set<string>();
    assert.deepEqual(
      statesToOffer([state({ restored_at: '2026-11-25T15:00:00Z' })], sessions, none),
      []
    );
    assert.deepEqual(statesToOffer([state({ problem: 'a symbolic link' })], sessions, none), []);
    assert.deepEqual(statesToOffer([state()], [session('train.ipynb', null)], none), []);
  });
});

describe('restore results', () => {
  const report: IRestoreReport = {
    status: 'partly_restored',
    reason: null,
    restored: ['model', 'frame'],
    failed: [{ name: 'loader', type: 'x.Loader', reason: "No module named 'x'" }],
    skipped_at_save: [],
    warnings: [],
    notices: ['GPU arrays (2 GiB) were restored to host memory: this server has no GPU.'],
    bytes: 2 * 1024 ** 3,
    saved_at: '2026-11-25T14:05:00+00:00',
    seconds: 2
  };

  test('what came back, what did not, and where GPU arrays went', () => {
    assert.equal(
      restoreResult(report),
      "Restored 2 variables (2 GiB). Not restored: loader (No module named 'x'). " +
        'GPU arrays (2 GiB) were restored to host memory: this server has no GPU.'
    );
  });

  test('a refusal gives its reason', () => {
    const refused = { ...report, status: 'refused' as const, reason: 'x is a symbolic link' };
    assert.equal(restoreResult(refused), 'x is a symbolic link');
  });
});
