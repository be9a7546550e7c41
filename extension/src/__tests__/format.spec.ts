/**
 * Quantities in words, held to the cases the Python sides are held to too
 * (test-data/byte-sizes.json, gpu-shares.json and durations.json; tests/meter/test_wording.py,
 * tests/spawner/test_shared_wording.py and test_shared_durations.py read the same files).
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  formatAmount,
  formatBytes,
  formatDuration,
  formatGiB,
  formatGpus,
  formatShare,
  formatUse
} from '../format';
import { quotaText } from '../summary';
import type { IGPUAmount, ILimited, UserLimit } from '../usage';
import { GIB, testData } from './fixtures';

interface IByteCase {
  bytes: number;
  text: string;
}

interface IAmountCase {
  exact: string;
  gpus: number;
  amount: string;
  gpus_text: string;
  share: string;
}

interface IUseCase {
  used: string;
  limit: string;
  text: string;
}

interface IQuotaEntryCase {
  used: IGPUAmount;
  limit: UserLimit | ILimited;
  text: string;
}

/** "3/4" -> 0.75, as the hub writes an exact amount (service-me.schema.json#/$defs/amount). */
function exactNumber(exact: string): number {
  const [numerator, denominator = '1'] = exact.split('/');
  return Number(numerator) / Number(denominator);
}

describe('byte sizes (test-data/byte-sizes.json)', () => {
  const { cases } = testData<{ cases: IByteCase[] }>('byte-sizes.json');

  for (const { bytes, text } of cases) {
    test(`${bytes} bytes read "${text}"`, () => {
      assert.equal(formatBytes(bytes), text);
    });
  }

  test('the status bar figure rounds as the sizes do', () => {
    assert.equal(formatGiB(1.25 * GIB), '1.3');
    assert.equal(formatGiB(3.1 * GIB), '3.1');
    assert.equal(formatGiB(20 * GIB), '20');
    assert.equal(formatGiB(0), '0');
  });
});

describe('GPU amounts and shares (test-data/gpu-shares.json)', () => {
  const shares = testData<{
    amounts: IAmountCase[];
    uses: IUseCase[];
    quota_entries: IQuotaEntryCase[];
  }>('gpu-shares.json');

  for (const { exact, gpus, amount, gpus_text, share } of shares.amounts) {
    test(`${exact} GPU: "${amount}", "${gpus_text}", "${share}"`, () => {
      assert.equal(gpus, exactNumber(exact), 'the case is consistent');
      assert.equal(formatAmount(gpus), amount);
      assert.equal(formatGpus(gpus), gpus_text);
      assert.equal(formatShare(gpus), share);
    });
  }

  for (const { used, limit, text } of shares.uses) {
    test(`${used} of ${limit}: "${text}"`, () => {
      assert.equal(formatUse(exactNumber(used), exactNumber(limit)), text);
    });
  }

  for (const { used, limit, text } of shares.quota_entries) {
    test(`the quota line "${text}"`, () => {
      assert.equal(quotaText(used, limit), text);
    });
  }
});

describe('configured durations (test-data/durations.json)', () => {
  const { cases } = testData<{ cases: Array<{ seconds: number; text: string }> }>('durations.json');

  for (const { seconds, text } of cases) {
    test(`${seconds} s read "${text}"`, () => {
      assert.equal(formatDuration(seconds), text);
    });
  }
});
