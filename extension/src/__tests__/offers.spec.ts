import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import type { Session } from '@jupyterlab/services';

import type { IRestoreReport, ISavedState } from '../hibernation-api';
import {
  conflictQuestion,
  discardQuestion,
  lostText,
  namesWithin,
  NOTIFICATION_MAX,
  offerKey,
  offerText,
  restoreHeadline,
  restoreResult,
  stateStamp,
  statesToOffer,
  withdrawnOffers
} from '../offers';

function state(overrides: Partial<ISavedState> = {}): ISavedState {
  return {
    key: '0123456789abcdef0123456789abcdef',
    path: 'train.ipynb',
    notebook_file: '/home/jovyan/train.ipynb',
    saved_at: '2026-11-25T14:05:00+00:00',
    bytes: 3 * 1024 ** 3,
    device_bytes: 0,
    variables: ['model', 'frame'],
    lost: [],
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
    offered.add(offerKey(first[0].state, 'k1'));
    assert.deepEqual(statesToOffer([state()], sessions, offered), []);
    const restarted = [session('train.ipynb', 'k3')];
    assert.equal(statesToOffer([state()], restarted, offered).length, 1);
    // A newer save of the notebook is a new offer; the old one is no longer among the current offers.
    const newer = statesToOffer(
      [state({ saved_at: '2026-11-25T16:00:00+00:00' })],
      sessions,
      offered
    );
    assert.deepEqual(
      newer.map(o => offerKey(o.state, o.kernelId)),
      ['0123456789abcdef0123456789abcdef 2026-11-25T16:00:00+00:00 k1']
    );
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
    conflicts: [],
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

  test('names the kernel already holds are asked about, and those kept are said', () => {
    const asked = {
      ...report,
      status: 'conflict' as const,
      restored: [],
      conflicts: ['lr', 'steps']
    };
    assert.equal(
      restoreResult(asked),
      'Nothing was restored yet: lr, steps differ between this kernel and the saved state. Keep yours, or take the saved ones?'
    );
    const values = [
      { name: 'lr', kernel: '0.5', saved: '0.1' },
      { name: 'steps', kernel: '99', saved: '10' }
    ];
    assert.equal(
      conflictQuestion({ ...asked, conflict_values: values }),
      'Nothing was restored yet: lr (yours 0.5, saved 0.1), steps (yours 99, saved 10) differ. Keep yours, or take the saved ones?'
    );
    const kept = {
      ...report,
      status: 'restored' as const,
      failed: [],
      notices: [],
      conflicts: ['lr']
    };
    assert.equal(restoreResult(kept), 'Restored 2 variables (2 GiB). Kept your own values of lr.');
  });

  test('a damaged state says which file, and what it cost', () => {
    const damaged = {
      ...report,
      notices: [],
      reason:
        'the saved state is damaged: arrays.bin is cut short (1000 bytes); the variables it lost are listed as not restored'
    };
    assert.match(
      restoreResult(damaged),
      /^Restored 2 variables \(2 GiB\)\. The saved state is damaged: arrays\.bin/
    );
  });

  test('a refusal gives its reason', () => {
    const refused = { ...report, status: 'refused' as const, reason: 'x is a symbolic link' };
    assert.equal(restoreResult(refused), 'x is a symbolic link');
  });
});

describe('discarding and withdrawn offers', () => {
  const now = new Date('2026-11-28T00:50:00Z');

  test('the question names what is deleted, when it was saved in the zone, and that it is final', () => {
    const saved = state({ saved_at: '2026-11-28T00:37:00+00:00', bytes: 7969177 });
    assert.equal(
      discardQuestion(saved, now, 'America/New_York'),
      'Delete the 2 variables of train.ipynb saved at 19:37 EST (7.6 MiB)? They cannot be restored afterwards.'
    );
    assert.equal(
      offerText(saved, now, 'America/New_York'),
      'Restore variables from 19:37 EST (7.6 MiB)'
    );
    const one = state({ variables: ['x'], saved_at: '2026-11-26T10:00:00+00:00', bytes: 900 });
    assert.equal(
      discardQuestion(one, now, 'UTC'),
      'Delete the 1 variable of train.ipynb saved at 26 Nov 10:00 UTC (900 B)? They cannot be restored afterwards.'
    );
  });

  test('an offer on screen is withdrawn once its state is restored, gone or saved again', () => {
    const open = state();
    const other = state({ key: 'ffffffffffffffffffffffffffffffff', path: 'other.ipynb' });
    const shown: [string, string][] = [
      [offerKey(open, 'k1'), stateStamp(open)],
      [offerKey(other, 'k2'), stateStamp(other)]
    ];
    assert.deepEqual(withdrawnOffers(shown, [open, other]), []);
    const restored = { ...open, restored_at: '2026-11-28T00:51:00Z' };
    assert.deepEqual(withdrawnOffers(shown, [restored, other]), [offerKey(open, 'k1')]);
    assert.deepEqual(withdrawnOffers(shown, [open]), [offerKey(other, 'k2')]);
    const newer = { ...open, saved_at: '2026-11-28T01:10:00+00:00' };
    assert.deepEqual(withdrawnOffers(shown, [newer, other]), [offerKey(open, 'k1')]);
  });
});

describe('a damaged state in a notification', () => {
  const cut = 'arrays.bin is cut short (1000 bytes)';
  const damaged: IRestoreReport = {
    status: 'partly_restored',
    reason: `the saved state is damaged: ${cut}; the variables it lost are listed as not restored`,
    restored: ['lr', 'epochs', 'notes', 'losses'],
    failed: [{ name: 'weights', type: 'ndarray', reason: `the saved state is damaged: ${cut}` }],
    skipped_at_save: [],
    warnings: [],
    conflicts: [],
    notices: [],
    bytes: 1200,
    saved_at: '2026-11-28T00:37:00+00:00',
    seconds: 0.1
  };

  test('the line a notification shows names the lost variable within what Lab shows', () => {
    assert.ok(restoreResult(damaged).length > NOTIFICATION_MAX); // Lab would cut the name off
    const headline = restoreHeadline(damaged);
    assert.equal(headline, 'Restored 4 of 5 variables (1.2 KiB). Not restored: weights.');
    assert.ok(headline.length <= NOTIFICATION_MAX);
  });

  test('many lost variables are counted, not cut off', () => {
    const failed = Array.from({ length: 30 }, (_, i) => ({
      name: `array_number_${i}`,
      type: 'ndarray',
      reason: `the saved state is damaged: ${cut}`
    }));
    const headline = restoreHeadline({ ...damaged, failed });
    assert.ok(headline.length <= NOTIFICATION_MAX, headline);
    assert.match(
      headline,
      /^Restored 4 of 34 variables \(1\.2 KiB\)\. Not restored: array_number_0, .* and \d+ more\.$/
    );
    assert.equal(namesWithin(['alpha', 'beta', 'gamma'], 16), 'alpha and 2 more');
    assert.equal(namesWithin(['alpha', 'beta', 'gamma'], 19), 'alpha, beta, gamma');
  });

  test('a short outcome is shown whole', () => {
    const whole = { ...damaged, status: 'restored' as const, reason: null, failed: [] };
    assert.equal(restoreHeadline(whole), restoreResult(whole));
  });

  test("the panel names a damaged state's lost variables with why", () => {
    const lost = [
      { name: 'weights', type: 'ndarray', reason: cut },
      { name: 'grads', type: 'ndarray', reason: cut }
    ];
    assert.equal(lostText(state({ lost })), `weights, grads (${cut})`);
    assert.equal(lostText(state()), '');
  });
});
