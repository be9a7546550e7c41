/**
 * The browser's time zone, told to the server extension when a page opens, so that the kernel
 * writes its times (the widget, %fracnb_restore) in the zone the user reads the page in:
 * PUT {base_url}fracnb/api/display-zone (fracnb_meter.displayzone, display-zone.schema.json).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

export const DISPLAY_ZONE_PATH = 'fracnb/api/display-zone';

/** The browser's IANA zone ("America/New_York"), or null where it names none. */
export function browserZone(): string | null {
  const zone = new Intl.DateTimeFormat().resolvedOptions().timeZone;
  return typeof zone === 'string' && zone !== '' ? zone : null;
}

/** Tell the server the browser's zone; a failure only costs the kernel's times their zone. */
export async function tellDisplayZone(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<void> {
  const zone = browserZone();
  if (zone === null) {
    return;
  }
  const url = URLExt.join(settings.baseUrl, DISPLAY_ZONE_PATH);
  const init = { method: 'PUT', body: JSON.stringify({ time_zone: zone }) };
  try {
    const response = await ServerConnection.makeRequest(url, init, settings);
    if (!response.ok) {
      console.warn(`@fracnb/meter: the server did not keep the time zone ${zone}`, response.status);
    }
  } catch (error) {
    console.warn('@fracnb/meter: the time zone could not be sent', error);
  }
}
