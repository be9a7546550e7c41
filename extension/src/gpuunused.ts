/**
 * GPU-unused time in words, for the panel's kernel rows (schemas/gpu-unused.schema.json). Pure: no DOM.
 */
import { formatDuration, formatMinutes } from './format';
import type { IGpuUnused } from './usage';

/**
 * "GPU unused for 30 s", "GPU unused for 42 min", "GPU unused for 2 h 5 min" (whole minutes,
 * rounded down: never more than measured), or null while the GPU was used in the last window
 * and when the time is unknown (the reason is no news to the reader: MIG, MPS, the driver).
 */
export function gpuUnusedText(unused: IGpuUnused): string | null {
  const seconds = unused.seconds;
  if (seconds === null || seconds <= 0) {
    return null;
  }
  const time = seconds < 60 ? formatDuration(seconds) : formatMinutes(Math.floor(seconds / 60));
  return `GPU unused for ${time}`;
}
