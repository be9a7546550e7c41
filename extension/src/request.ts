/**
 * The usage API of the fracnb server extension: its reply shape and one typed fetch.
 */
import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/** The path of the usage endpoint below the server's base URL. */
export const USAGE_PATH = 'fracnb/api/usage';

export interface IMigHandle {
  gpu_instance_id: number;
  parent_uuid: string;
}

export interface IGpu {
  index: number;
  name: string;
  uuid: string;
  memory_total_bytes: number;
  memory_used_bytes: number;
  utilization_percent: number | null;
  mig: IMigHandle | null;
}

export interface IKernelUsage {
  id: string;
  name: string;
  session_name: string | null;
  path: string | null;
  execution_state: string | null;
  pid: number | null;
  /** Null when the driver cannot attribute memory to processes; never estimated. */
  gpu_memory_bytes: number | null;
}

export interface IBudget {
  fraction: number | null;
  memory_bytes: number | null;
  isolation: string | null;
  backend: string | null;
  profile: string | null;
  /** Why the FRACNB_* variables could not be read, when they were malformed. */
  error?: string | null;
}

export interface IQuotaEntry {
  used: number;
  limit: number;
}

export interface IQuota {
  user: IQuotaEntry | null;
  groups: Array<IQuotaEntry & { name: string }>;
}

export interface ICull {
  idle_timeout_seconds: number;
  cull_at: string;
  seconds_left: number;
  warning: boolean;
}

export interface IUsage {
  available: boolean;
  reason: string | null;
  simulated: boolean;
  per_process_memory: boolean;
  gpus: IGpu[];
  kernels: IKernelUsage[];
  server: { gpu_memory_bytes: number | null };
  other_tenants: { gpu_memory_bytes: number | null };
  budget: IBudget;
  quota: IQuota | null;
  cull: ICull | null;
  sampled_at: string;
}

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
