/**
 * Quantities in words: byte sizes, GPU amounts and shares, durations. A leaf: it imports
 * nothing, so every other module may use it. Pure: no DOM.
 *
 * fracnb_meter/wording.py and the hub's formatters write the same; the shared cases in
 * test-data/byte-sizes.json, gpu-shares.json and durations.json hold all of them to it.
 */

const UNITS: Array<[string, number]> = [
  ['TiB', 1024 ** 4],
  ['GiB', 1024 ** 3],
  ['MiB', 1024 ** 2],
  ['KiB', 1024]
];

/**
 * ``value`` rounded to ``places`` decimals, halves up, as text without trailing zeros:
 * 1.25 -> "1.3", 2 -> "2". The same arithmetic as the Python side, so both agree to the last
 * digit (Math.round is not used: its ties differ from floor(x + 0.5) at the edges).
 */
export function roundedText(value: number, places: number): string {
  const scale = 10 ** places;
  const text = (Math.floor(value * scale + 0.5) / scale).toFixed(places);
  return places > 0 ? text.replace(/\.?0+$/, '') : text;
}

/** Bytes as GiB with at most one decimal: 3.1, 20, 0.2 (the status bar's fixed unit). */
export function formatGiB(bytes: number): string {
  return roundedText(bytes / UNITS[1][1], 1);
}

/**
 * A size with its unit: "1.5 GiB", "300 MiB", "0 B". The largest binary unit in which the
 * size, to one decimal, is at least 1; sizes under 1 KiB in bytes.
 */
export function formatBytes(bytes: number): string {
  for (const [unit, size] of UNITS) {
    const text = roundedText(bytes / size, 1);
    if (Number(text) >= 1) {
      return `${text} ${unit}`;
    }
  }
  return `${Math.round(bytes)} B`;
}

/** An amount of GPUs, at most three decimals: "0.75", "5.75", "0.333", "2". */
export function formatAmount(gpus: number): string {
  return roundedText(gpus, 3);
}

/** The unit for an amount as written: "GPU" for more than 0 and up to 1, else "GPUs". */
function gpuUnit(amount: string): string {
  const value = Number(amount);
  return value > 0 && value <= 1 ? 'GPU' : 'GPUs';
}

/** An amount of GPUs held or allowed: "0 GPUs", "0.25 GPU", "1 GPU", "2 GPUs". */
export function formatGpus(gpus: number): string {
  const amount = formatAmount(gpus);
  return `${amount} ${gpuUnit(amount)}`;
}

/** A server's share of GPUs: "0.25 GPU", "1 GPU", "2 GPUs", and "no GPU" for none. */
export function formatShare(gpus: number): string {
  const amount = formatAmount(gpus);
  return Number(amount) === 0 ? 'no GPU' : `${amount} ${gpuUnit(amount)}`;
}

/** A use against a limit, in the limit's unit: "0 of 1 GPU", "0.75 of 2 GPUs". */
export function formatUse(used: number, limit: number): string {
  const amount = formatAmount(limit);
  return `${formatAmount(used)} of ${amount} ${gpuUnit(amount)}`;
}

/** Whole minutes as "45 min", "2 h" or "1 h 30 min". */
export function formatMinutes(minutes: number): string {
  if (minutes < 60) {
    return `${minutes} min`;
  }
  const hours = Math.floor(minutes / 60);
  const rest = minutes % 60;
  return rest === 0 ? `${hours} h` : `${hours} h ${rest} min`;
}

/**
 * A configured duration (an idle timeout, a maximum age): "30 s", "2.5 min", "8 h", "2 d". Under
 * an hour, minutes to one decimal, so that 150 s is "2.5 min", not "3 min"; from an hour, hours
 * and whole minutes; whole days from 48 h (test-data/durations.json holds the hub to it too).
 */
export function formatDuration(seconds: number): string {
  const whole = Math.round(seconds);
  if (whole < 60) {
    return `${whole} s`;
  }
  const minutes = roundedText(whole / 60, 1);
  if (Number(minutes) < 60) {
    return `${minutes} min`;
  }
  const total = Math.round(whole / 60);
  const hours = Math.floor(total / 60);
  if (hours >= 48 && total % 60 === 0) {
    return hours % 24 === 0 ? `${hours / 24} d` : `${hours} h`;
  }
  return formatMinutes(total);
}

/**
 * "14:05": the time of day on a 24-hour clock in ``timeZone`` (default: the browser's), where a line
 * says the zone once or not at all (fracnb_spawner.common.clock.time_of_day).
 */
export function timeOfDay(moment: Date, timeZone?: string): string {
  return new Intl.DateTimeFormat('en-GB', {
    hour: '2-digit',
    minute: '2-digit',
    hourCycle: 'h23',
    timeZone
  }).format(moment);
}

/**
 * "14:05 CET": the time of day with the zone's abbreviation, as the hub's pages write their times
 * ("14:05 UTC"; fracnb_spawner.common.clock.clock_text).
 */
export function clockTime(moment: Date, timeZone?: string): string {
  const zone = zoneName(moment, timeZone);
  const time = timeOfDay(moment, timeZone);
  return zone ? `${time} ${zone}` : time;
}

/**
 * The zone's short name: "UTC", "CET", "EST". British English names European zones, American English
 * American ones; where neither has a name, the offset ("GMT+5:30").
 */
export function zoneName(moment: Date, timeZone?: string): string {
  const names = ['en-GB', 'en-US'].map(
    locale =>
      new Intl.DateTimeFormat(locale, { timeZone, timeZoneName: 'short' })
        .formatToParts(moment)
        .find(part => part.type === 'timeZoneName')?.value ?? ''
  );
  return names.find(name => name !== '' && !/^GMT[+-]/.test(name)) ?? names[0];
}
