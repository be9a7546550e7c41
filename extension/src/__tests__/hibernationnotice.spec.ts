import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { hibernationLines, unsavedOpenLine } from '../hibernationnotice';
import { NOTHING_HELD_CONSEQUENCES, stopNotice } from '../stopped';
import type { IHibernationReport, IKernelOutcome } from '../usage';
import { cull, deadline, testData, usage } from './fixtures';

interface INoticeCase {
  kernels: IKernelOutcome[];
  time_zone: string;
  lines: string[];
}

describe('what a hibernation saved (test-data/hibernation-notices.json)', () => {
  const { cases } = testData<{ cases: INoticeCase[] }>('hibernation-notices.json');
  for (const item of cases) {
    test(item.lines[0], () => {
      assert.deepEqual(hibernationLines(item.kernels, item.time_zone), item.lines);
    });
  }
});

function report(kernels: IKernelOutcome[]): IHibernationReport {
  return {
    started_at: '2026-03-01T12:04:00+00:00',
    seconds: 1.5,
    timeout_seconds: 120,
    limit_bytes: 4 * 1024 ** 3,
    saved_bytes: kernels.reduce((sum, k) => sum + k.bytes, 0),
    totals: {
      saved: 0,
      partly_saved: 0,
      failed: 0,
      skipped_over_limit: 0,
      busy: 0,
      empty: 0,
      not_supported: 0
    },
    kernels
  };
}

describe('the stopped notice after a hibernation', () => {
  const { cases } = testData<{ cases: INoticeCase[] }>('hibernation-notices.json');

  test('lists what was saved and says the variables come back', () => {
    const last = usage({ cull: cull(), hibernation: report(cases[0].kernels) });
    const notice = stopNotice(last, 235);
    assert.equal(notice.cause, 'idle');
    assert.equal(notice.saved.length, 1);
    assert.match(
      notice.saved[0],
      /^Variables of train\.ipynb saved at \d\d:05 \w+: 3\.2 GiB, 41 variables; 2 skipped/
    );
    assert.match(notice.consequences, /open the notebook again to restore them/);
    assert.match(notice.consequences, /Variables of train\.ipynb saved/);
    assert.match(notice.toast, /Your variables were saved/);
    assert.ok(notice.toast.length <= 140, notice.toast);
  });

  test('says when nothing was saved, and keeps the plain consequences', () => {
    const failed = cases.find(item => item.kernels[0]?.status === 'skipped_over_limit');
    assert.ok(failed);
    const notice = stopNotice(usage({ cull: cull(), hibernation: report(failed.kernels) }), 235);
    assert.deepEqual(
      notice.saved,
      failed.lines.map(line => line)
    );
    assert.match(notice.consequences, /Running kernels were shut down/);
    assert.match(notice.toast, /Saved files are kept;/);
  });

  test('kernels without variables: said once, and nothing is called lost', () => {
    const empty: IKernelOutcome = {
      ...cases[0].kernels[0],
      status: 'empty',
      bytes: 0,
      variables: 0,
      skipped: []
    };
    const notice = stopNotice(usage({ cull: cull(), hibernation: report([empty]) }), 235);
    assert.deepEqual(notice.saved, []);
    assert.equal(notice.consequences, NOTHING_HELD_CONSEQUENCES);
    assert.doesNotMatch(`${notice.consequences} ${notice.toast}`, /lost|No variables to save/);
    assert.ok(notice.toast.length <= 140, notice.toast);
  });

  test('without a hibernation the notice is as before', () => {
    const notice = stopNotice(usage({ cull: cull() }), 235);
    assert.deepEqual(notice.saved, []);
    assert.match(notice.consequences, /Running kernels were shut down/);
  });

  test('a stop on request says so, as the hub told the server when it asked for the save', () => {
    const saved = report(cases[0].kernels);
    const onRequest = stopNotice(usage({ hibernation: saved, hibernation_stop: 'user' }), 0);
    assert.equal(onRequest.cause, 'user');
    assert.equal(onRequest.headline, 'This server was stopped on request by you or an admin.');
    assert.match(onRequest.toast, /Your variables were saved/);
    // A cull the hub named wins over the deadline the page last read (none here).
    const culled = stopNotice(usage({ hibernation: saved, hibernation_stop: 'max-age' }), 0);
    assert.equal(culled.headline, 'This server was stopped at its maximum age.');
    // Without a hibernation the hub's word is not there to read: as before.
    assert.equal(stopNotice(usage({ hibernation_stop: null }), 0).cause, 'unknown');
  });

  test('a GPU-unused stop names its cause', () => {
    const last = usage({ cull: cull({ deadline: deadline({ reason: 'gpu-unused' }) }) });
    assert.equal(
      stopNotice(last, 235).headline,
      'This server was stopped for not using its GPU while idle.'
    );
    const busy = usage({ cull: cull({ deadline: deadline({ reason: 'gpu-unused-busy' }) }) });
    assert.equal(stopNotice(busy, 235).cause, 'gpu-unused-busy');
    assert.ok(stopNotice(busy, 235).toast.length <= 140);
  });
});

describe("a stop's toast in the tab of a notebook that was running a cell", () => {
  const saved: IKernelOutcome = {
    kernel_id: 'k1',
    path: 'prepare.ipynb',
    status: 'saved',
    reason: null,
    bytes: 2048,
    variables: 3,
    skipped: [],
    saved_at: '2026-03-01T12:04:01+00:00',
    seconds: 0.2
  };
  const busy: IKernelOutcome = {
    ...saved,
    kernel_id: 'k2',
    path: 'train.ipynb',
    status: 'busy',
    reason: 'the kernel is busy: it is left alone and not saved',
    bytes: 0,
    variables: 0,
    saved_at: null,
    seconds: null
  };
  const last = usage({ hibernation: report([saved, busy]), hibernation_stop: 'user' });

  test('says that its variables were not saved, not that they were', () => {
    const notice = stopNotice(last, 0, ['train.ipynb']);
    assert.doesNotMatch(notice.toast, /Your variables were saved/);
    assert.match(notice.toast, /train\.ipynb was running a cell: its variables were not saved\.$/);
    assert.ok(notice.toast.length <= 140, notice.toast);
    assert.equal(unsavedOpenLine(last, ['train.ipynb', 'prepare.ipynb']), null);
  });

  test('the tab of a saved notebook, or one with none open, says they were saved', () => {
    assert.match(stopNotice(last, 0, ['prepare.ipynb']).toast, /Your variables were saved/);
    assert.match(stopNotice(last, 0, []).toast, /Your variables were saved/);
    // The panel beside it lists every notebook's outcome, as before.
    assert.equal(stopNotice(last, 0, ['train.ipynb']).saved.length, 2);
  });
});
