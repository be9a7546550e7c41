/**
 * Usage documents for the unit tests, typed by the schema-generated types so that the
 * compiler rejects any field the schema does not allow.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

import type { ICullStatus, IDeadline, IKernelUsage, IQuota, IUsage } from '../usage';

/** The extension's folder, from lib-test/__tests__ where the compiled tests run. */
export const EXTENSION_DIR = join(__dirname, '..', '..');

/** A file of test-data/, whose cases the Python tests read too. */
export function testData<T>(name: string): T {
  return JSON.parse(readFileSync(join(EXTENSION_DIR, 'test-data', name), 'utf-8')) as T;
}

export const GIB = 1024 ** 3;

export function kernel(overrides: Partial<IKernelUsage> = {}): IKernelUsage {
  return {
    id: '0123456789abcdef',
    name: 'python3',
    session_name: null,
    path: 'train.ipynb',
    execution_state: 'idle',
    pid: 4242,
    gpu_memory_bytes: GIB,
    gpu_unused: { seconds: 0, reason: null },
    ...overrides
  };
}

/** A quarter of a simulated 80 GiB A100 with a 20 GiB budget, one kernel. */
export function usage(overrides: Partial<IUsage> = {}): IUsage {
  return {
    available: true,
    reason: null,
    simulated: true,
    per_process_memory: true,
    gpus: [
      {
        index: 0,
        name: 'Simulated NVIDIA A100-SXM4-80GB',
        uuid: 'GPU-5e1f0000-0000-4000-8000-000000000000',
        memory_total_bytes: 80 * GIB,
        memory_used_bytes: 3 * GIB,
        utilization_percent: 37,
        mig: null
      }
    ],
    kernels: [kernel()],
    server: { gpu_memory_bytes: GIB },
    other_tenants: { gpu_memory_bytes: 2 * GIB },
    budget: {
      fraction: 0.25,
      memory_bytes: 20 * GIB,
      isolation: 'none',
      backend: 'time-slicing',
      profile: 'quarter',
      profile_display_name: 'Quarter of an A100',
      soft_cap_bytes: 19 * GIB,
      error: null
    },
    quota: null,
    cull: null,
    history: null,
    advice: null,
    gpu_unused: { seconds: 0, reason: null },
    hibernation: null,
    sampled_at: '2026-03-01T12:00:00.000000+00:00',
    ...overrides
  };
}

export function deadline(overrides: Partial<IDeadline> = {}): IDeadline {
  return {
    reason: 'idle',
    cull_at: '2026-03-01T12:04:00Z',
    seconds_left: 240,
    warning: true,
    ...overrides
  };
}

export function cull(overrides: Partial<ICullStatus> = {}): ICullStatus {
  return { idle_timeout_seconds: 1800, max_age_seconds: 0, deadline: deadline(), ...overrides };
}

export const QUOTA: IQuota = {
  user: { used: { gpus: 0.75, exact: '3/4' }, limit: { state: 'limited', gpus: 2, exact: '2' } },
  groups: [
    {
      name: 'team-a',
      used: { gpus: 5.75, exact: '23/4' },
      limit: { state: 'limited', gpus: 6, exact: '6' }
    }
  ]
};
