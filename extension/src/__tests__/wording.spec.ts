import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import type { IDeadline } from '../usage';
import {
  adviceText,
  cullMessage,
  cullWarning,
  gpuUnusedWarning,
  deviceName,
  restoreOffer,
  sessionPeakText,
  softCapText,
  zoneName
} from '../wording';
import { cull, deadline, GIB, testData, usage } from './fixtures';

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

/** The cases fracnb_meter.wording.cull_warning is held to as well (tests/meter/test_wording.py). */
interface ICullWarningCase {
  deadline: IDeadline | null;
  time_zone: string;
  text: string | null;
}

describe('culling warnings', () => {
  const { cases } = testData<{ cases: ICullWarningCase[] }>('cull-warnings.json');

  test('the shared cases cover every reason of the schema', () => {
    const reasons = new Set(cases.map(c => c.deadline?.reason));
    for (const reason of ['idle', 'demand', 'max-age']) {
      assert.ok(reasons.has(reason as IDeadline['reason']), reason);
    }
  });

  for (const [index, { deadline, time_zone, text }] of cases.entries()) {
    test(`case ${index}: ${deadline?.reason ?? 'no deadline'} in ${time_zone}`, () => {
      assert.equal(cullWarning(deadline, time_zone), text);
    });
  }

  test('the demand warning says who waits and when the server stops, in local time and zone', () => {
    const at = new Date(2026, 10, 23, 14, 5);
    const text = cullWarning(deadline({ reason: 'demand', cull_at: at.toISOString() }));
    assert.equal(
      text,
      `Someone is waiting for a GPU; this idle server stops at 14:05 ${zoneName(at)} unless you use it.`
    );
    assert.match(zoneName(at), /^[A-Z]{2,5}$|^GMT/);
  });
});

describe('the GPU-unused warning of a busy server', () => {
  test('names the memory held and the time unused', () => {
    const status = cull({
      deadline: null,
      gpu_unused: { seconds: 3600, gpu_memory_bytes: 18 * GIB }
    });
    assert.equal(
      gpuUnusedWarning(status),
      'This server holds 18 GiB of GPU memory but has not used the GPU for 1 h.'
    );
    assert.equal(cullMessage(usage({ cull: status })), gpuUnusedWarning(status));
  });

  test('a deadline in warning speaks first; no field, no warning', () => {
    const both = cull({ gpu_unused: { seconds: 4000, gpu_memory_bytes: null } });
    assert.match(cullMessage(usage({ cull: both })) ?? '', /^Idle:/);
    assert.equal(
      gpuUnusedWarning(cull({ gpu_unused: { seconds: 1500, gpu_memory_bytes: null } })),
      'This server holds a GPU share but has not used the GPU for 25 min.'
    );
    assert.equal(gpuUnusedWarning(cull()), null);
    assert.equal(gpuUnusedWarning(null), null);
  });
});

/** The cases fracnb_meter.wording.session_peak is held to as well (tests/meter/test_wording.py). */
interface ISessionPeakCase {
  peak_bytes: number | null;
  budget_bytes: number | null;
  text: string | null;
}

describe('the session peak', () => {
  const { cases } = testData<{ cases: ISessionPeakCase[] }>('session-peaks.json');

  for (const [index, { peak_bytes, budget_bytes, text }] of cases.entries()) {
    test(`case ${index}: ${peak_bytes} of ${budget_bytes}`, () => {
      assert.equal(sessionPeakText(peak_bytes, budget_bytes), text);
    });
  }
});

describe('advice for next time', () => {
  const given =
    'Your last 3 sessions on 0.25 GPU peaked at 4 GiB or less. 1/8 GPU (10 GiB) would have fit.';

  test("the hub's advice, word for word", () => {
    const advice = {
      state: 'advice' as const,
      text: given,
      larger: false,
      sessions: 3,
      p95_bytes: 4 * GIB
    };
    assert.equal(adviceText(usage({ advice })), given);
  });

  test('too few sessions yet: says how many are needed', () => {
    const advice = {
      state: 'waiting' as const,
      text: 'No advice yet: 3 sessions needed (1 so far).'
    };
    assert.equal(adviceText(usage({ advice })), 'No advice yet: 3 sessions needed (1 so far).');
  });

  test('nothing to say, or no answer from the hub: nothing', () => {
    assert.equal(adviceText(usage({ advice: { state: 'none' } })), null);
    assert.equal(adviceText(usage({ advice: null })), null);
  });
});

/** The cases fracnb_meter.wording.restore_offer is held to as well (tests/meter/test_wording.py). */
interface IRestoreOfferCase {
  saved_at: string;
  bytes: number;
  now: string;
  time_zone: string;
  text: string;
}

describe('restore offers', () => {
  const { cases } = testData<{ cases: IRestoreOfferCase[] }>('restore-offers.json');

  for (const { saved_at, bytes, now, time_zone, text } of cases) {
    test(text, () => {
      assert.equal(restoreOffer(new Date(saved_at), bytes, new Date(now), time_zone), text);
    });
  }
});
