/**
 * Budget wording for the panel that reads the contract's fields. Pure: no DOM.
 */
import { budgetBytes, formatBytes } from './summary';
import type { IBudget } from './usage';

/** The frameworks the spawner's soft cap reaches (docs/contract.md, FRACNB_SOFT_CAP_BYTES). */
export const SOFT_CAP_FRAMEWORKS = 'PyTorch, JAX and CuPy; TensorFlow through the startup hook';

/** "19 GiB (95 % of the budget) for PyTorch, ...", or null where no soft cap was set. */
export function softCapText(budget: IBudget): string | null {
  const cap = budget.soft_cap_bytes;
  const memory = budgetBytes(budget);
  if (cap === null || cap <= 0) {
    return budget.isolation === 'none' && memory !== null
      ? 'none: nothing stops you using more, so stay within your budget'
      : null;
  }
  const percent =
    memory === null ? '' : ` (${Math.round((cap / memory) * 100)}\u00a0% of the budget)`;
  return `${formatBytes(cap)}${percent} for ${SOFT_CAP_FRAMEWORKS}. Other code is not capped.`;
}

/** The device's name without a "simulated" mark when the badge says so already. */
export function deviceName(name: string, simulated: boolean): string {
  if (!simulated) {
    return name;
  }
  return name
    .replace(/\s*\(simulated\)\s*$/i, '')
    .replace(/^simulated\s+/i, '')
    .trim();
}
