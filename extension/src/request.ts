/**
 * The usage API of the fracnb server extension: one typed fetch. The reply's types are
 * generated from its JSON Schema (./usage.ts).
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import type { IUsage } from './usage';

/** The path of the usage endpoint below the server's base URL. */
export const USAGE_PATH = 'fracnb/api/usage';

/** Raised when the server answers with something other than a usage reply. */
export class UsageRequestError extends Error {
  constructor(
    message: string,
    readonly status: number | null
  ) {
    super(message);
    this.name = 'UsageRequestError';
  }
}

/**
 * Fetch one usage sample. Throws `UsageRequestError` on an HTTP error or a reply that
 * is not a usage object, so the poller can back off.
 */
export async function fetchUsage(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<IUsage> {
  const url = URLExt.join(settings.baseUrl, USAGE_PATH);
  let response: Response;
  try {
    response = await ServerConnection.makeRequest(url, { method: 'GET' }, settings);
  } catch (error) {
    throw new UsageRequestError(`cannot reach the server: ${String(error)}`, null);
  }
  if (!response.ok) {
    throw new UsageRequestError(
      `the usage API answered ${response.status} ${response.statusText}`,
      response.status
    );
  }
  const body: unknown = await response.json();
  if (!isUsage(body)) {
    throw new UsageRequestError('the usage API answered with an unexpected shape', response.status);
  }
  return body;
}

function isUsage(body: unknown): body is IUsage {
  if (typeof body !== 'object' || body === null) {
    return false;
  }
  const candidate = body as Partial<IUsage>;
  return (
    typeof candidate.available === 'boolean' &&
    Array.isArray(candidate.gpus) &&
    Array.isArray(candidate.kernels) &&
    typeof candidate.server === 'object' &&
    typeof candidate.budget === 'object' &&
    candidate.budget !== null
  );
}
