/**
 * The usage API's reply, GET {base_url}fracnb/api/usage.
 *
 * Generated from fracnb_schemas/schemas/usage.schema.json (and the schemas it refers to)
 * by `jlpm build:types`: edit the schema, not this file. docs/contract.md explains it.
 */

export type Bytes = number;
/**
 * Who enforces the memory budget: hard (MIG, also through dra; whole GPUs), enforced (HAMi; a dra slice with the MPS pinned-memory limit), per-process (MPS), none (time-slicing, KAI, dra memory slices, CPU-only).
 */
export type Isolation = 'hard' | 'enforced' | 'per-process' | 'none';
/**
 * The GPU-sharing mechanism of the server: time-slicing, mps, mig, hami, kai, dra (a Kubernetes DRA ResourceClaim: a memory slice or a MIG device), whole (whole GPUs) or none (CPU-only). The list and its order are the spawner's backend table (fracnb_spawner.gpu.table.TABLE); a test checks them.
 */
export type Backend = 'time-slicing' | 'mps' | 'mig' | 'hami' | 'kai' | 'dra' | 'whole' | 'none';
export type UserLimit = ILimited | IUnlimited | INoQuota;
/**
 * GET {FRACNB_SERVICE_URL}api/advice?profile=<FRACNB_PROFILE>&choice=<FRACNB_CHOICE> of the hub's fracnb service: the caller's right-sizing advice for their next session on that choice, from their own sessions only (fracnb_spawner.history.advice, as on the spawn form). Produced by fracnb_spawner.service.api.advice; checked on receipt by fracnb_meter.nextadvice, which passes it on as the usage document's advice.
 */
export type ServiceAdvice = IAdviceGiven | IAdviceWaiting | INoAdvice;

/**
 * GET {base_url}fracnb/api/usage of the fracnb_meter server extension (and the in-kernel widget's document): GPU memory of this server's kernels against the budget, and the hub's quota and culling status. Produced by fracnb_meter (usage.build_usage, hubservice.report_from_me); read by @fracnb/meter, whose types are generated from this file.
 */
export interface IUsage {
  /**
   * Whether NVML could be read; false: reason says why and gpus is empty.
   */
  available: boolean;
  /**
   * Why figures are missing or partial, as sentences; null when nothing is missing.
   */
  reason: string | null;
  /**
   * Whether the GPU is the fake NVML library (tests, demo).
   */
  simulated: boolean;
  /**
   * Whether the driver attributes memory to processes; false: per-kernel figures are null.
   */
  per_process_memory: boolean;
  gpus: IGpu[];
  kernels: IKernelUsage[];
  server: IMemory;
  other_tenants: IMemory;
  budget: IBudget;
  /**
   * The user's GPU quotas from the hub's fracnb service; null: no service is configured, or it did not answer.
   */
  quota: null | IQuota;
  /**
   * This server's culling status from the hub's fracnb service; null: no service is configured, or it did not answer.
   */
  cull: null | ICullStatus;
  /**
   * GPU memory over the session, for the charts; null: the producer keeps none.
   */
  history: null | IMemoryHistory;
  /**
   * The user's right-sizing advice for their next session on this server's choice, from the hub's fracnb service; null: no service is configured, it did not answer, or the document comes from the in-kernel widget before its first answer.
   */
  advice: null | ServiceAdvice;
  gpu_unused: IGpuUnused;
  /**
   * This server's last hibernation, as POST fracnb/api/hibernate answered it (the hub's fracnb service asks just before it stops the server), for the stopped-server notice; null when there was none since the server started, or in the in-kernel widget's document.
   */
  hibernation: null | IHibernationReport;
  /**
   * Why the stop that asked for that hibernation is made, as the hub said (POST fracnb/api/hibernate?stop=): user (someone asked for it), or the fracnb service's cull reason; kueue: Kueue stopped the server (preempted or evicted it) and the hibernation is the server's own save at that stop, whose notice is stop_notice; null when it did not say, or there is no hibernation.
   */
  hibernation_stop?:
    null | 'user' | 'idle' | 'demand' | 'gpu-unused' | 'gpu-unused-busy' | 'max-age' | 'kueue';
  /**
   * The notice of the stop as the hub's pages say it, from the hub's fracnb service (stop-save-answer.schema.json): why Kueue stopped this server and what was saved, naming the notebooks; null for every other stop, or none.
   */
  stop_notice?: string | null;
  /**
   * When the figures were read, ISO 8601 with time zone.
   */
  sampled_at: string;
}
/**
 * A leaf device this server can use: a whole GPU or a MIG instance.
 */
export interface IGpu {
  index: number;
  name: string;
  uuid: string;
  memory_total_bytes: Bytes;
  /**
   * In use by all processes on the device, other users' included.
   */
  memory_used_bytes: number;
  /**
   * Null for MIG instances, which NVML does not report.
   */
  utilization_percent: null | number;
  mig: null | IMigHandle;
}
export interface IMigHandle {
  gpu_instance_id: number;
  parent_uuid: string;
}
export interface IKernelUsage {
  id: string;
  /**
   * Kernel spec name, e.g. python3.
   */
  name: string;
  session_name: string | null;
  /**
   * The notebook's server-relative path.
   */
  path: string | null;
  execution_state: string | null;
  /**
   * Null for kernels that are not local processes.
   */
  pid: number | null;
  /**
   * Null when the driver cannot attribute memory to processes; never estimated.
   */
  gpu_memory_bytes: null | Bytes;
  gpu_unused: IGpuUnused;
}
/**
 * How long a kernel, or a whole server, has done no GPU work, from NVML's per-process utilisation samples, counted in windows of 30 s (the meter's gpu_unused_window): a window with any GPU work resets the count to 0; a window without GPU work and with data for all of it adds a window; a window with a stretch without data makes the count unknown, never unused (MIG, MPS, a driver before 570.86.15 in a container, NVML errors, a gap between the meter's readings longer than the driver keeps samples). A kernel's count covers the kernel and its child processes, from the meter's first reading of the kernel; the server's covers all its processes (kernels, their children, terminals, the server itself). Produced by fracnb_meter.gpuunused; used in usage.schema.json (each kernel's gpu_unused, and the server's at the top level) and session-report.schema.json (the server's, for the hub's fracnb service).
 */
export interface IGpuUnused {
  /**
   * Seconds without GPU work: the whole windows since the last window with GPU work or without data; 0: GPU work in the current or the last window; null: unknown, reason says why.
   */
  seconds: null | number;
  /**
   * Why seconds is unknown, as a sentence; null when it is known.
   */
  reason: string | null;
}
/**
 * GPU memory of a group of processes: server (this server's kernels and the server itself) or other_tenants (processes on the same device(s) that are not this server's).
 */
export interface IMemory {
  /**
   * GPU memory in bytes; null when the driver cannot attribute it (never estimated).
   */
  gpu_memory_bytes: null | Bytes;
}
/**
 * The GPU share the spawner granted (FRACNB_* variables, pod-environment.schema.json). All null on a server without them, e.g. a workstation.
 */
export interface IBudget {
  fraction: null | number;
  /**
   * The memory budget; 0 for CPU-only servers.
   */
  memory_bytes: null | Bytes;
  isolation: null | Isolation;
  backend: null | Backend;
  /**
   * The profile's slug.
   */
  profile: string | null;
  /**
   * The profile's name as the spawn form shows it (FRACNB_PROFILE_DISPLAY_NAME); null when the pod does not carry it.
   */
  profile_display_name: string | null;
  /**
   * Where nothing enforces the budget (isolation none): the cap the spawner gave PyTorch, JAX and CuPy (and TensorFlow through the startup hook), in bytes (FRACNB_SOFT_CAP_BYTES); null when none was set.
   */
  soft_cap_bytes: null | Bytes;
  /**
   * Why the FRACNB_* variables could not be read (every other field is then null); null when they could.
   */
  error: string | null;
}
export interface IQuota {
  user: IUserQuota;
  /**
   * The user's groups that have a quota.
   */
  groups: IGroupQuota[];
  /**
   * With Kueue, while the user's team runs on quota its cohort lent: that Kueue can preempt this server (service-me.schema.json's borrowing); absent otherwise.
   */
  borrowing?: string;
}
export interface IUserQuota {
  used: IGPUAmount;
  limit: UserLimit;
}
/**
 * An amount of GPUs: gpus for display, exact as a reduced ratio.
 */
export interface IGPUAmount {
  gpus: number;
  exact: string;
}
/**
 * A quota applies: at most this many GPUs.
 */
export interface ILimited {
  state: 'limited';
  gpus: number;
  exact: string;
}
/**
 * Explicitly unlimited (c.FracnbQuotas.user_quotas maps the user to None); for available: nothing limits one more server.
 */
export interface IUnlimited {
  state: 'unlimited';
}
/**
 * No quota is configured here (no default_user_quota and no user_quotas entry; a group without a group_quotas entry).
 */
export interface INoQuota {
  state: 'none';
}
export interface IGroupQuota {
  name: string;
  used: IGPUAmount;
  limit: ILimited;
}
/**
 * When a server will be stopped automatically, and why.
 */
export interface ICullStatus {
  /**
   * Seconds without activity after which the server is stopped; 0: never for idleness.
   */
  idle_timeout_seconds: number;
  /**
   * Seconds after its start after which the server is stopped even if in use; 0: no limit.
   */
  max_age_seconds: number;
  /**
   * The next automatic stop; null: none is scheduled (no idle timeout and no maximum age apply, or the server is not ready yet).
   */
  deadline: null | IDeadline;
  /**
   * Present only while the server has a busy kernel and its GPU has been unused for at least the profile's GPU-unused timeout: it is warned, not stopped (unless the profile's longer gpu_unused_busy_timeout gives the deadline, reason gpu-unused-busy).
   */
  gpu_unused?: {
    /**
     * Seconds without GPU work, as the notebook last reported them.
     */
    seconds: number;
    /**
     * GPU memory the server's processes held then; null when unknown.
     */
    gpu_memory_bytes: number | null;
  };
}
export interface IDeadline {
  /**
   * idle: activity moves the deadline back. demand: idle while someone waits for the kind of GPU slot this server holds, so the profile's shorter idle timeout under demand applies; activity moves the deadline back too. max-age: the server has reached its maximum age; using it does not move the deadline. gpu-unused: every kernel idle and the GPU unused for the profile's GPU-unused timeout (from the notebook's reports); using the GPU moves it back, and the server is asked to save its variables before the stop. gpu-unused-busy: a kernel busy on the CPU and the GPU unused for the profile's longer gpu_unused_busy_timeout; the server is stopped even while the cell runs, unless it uses the GPU.
   */
  reason: 'idle' | 'demand' | 'max-age' | 'gpu-unused' | 'gpu-unused-busy';
  /**
   * When the server is stopped (at the first culling pass after this moment), ISO 8601 in UTC.
   */
  cull_at: string;
  /**
   * Seconds from the report to cull_at; 0 when it has passed.
   */
  seconds_left: number;
  /**
   * Whether the deadline is within warning_lead_seconds: the notebook warns its user.
   */
  warning: boolean;
  /**
   * Present (true) only when the stop at this deadline asks the server to save its idle kernels' variables first (a GPU server with hibernation on for this reason: FracnbService.hibernation_timeout, hibernate_at_max_age), so the warning can say so; absent: the stop saves nothing, and no warning may claim it. Present only then, since a meter of an older version refuses fields it does not know.
   */
  saves_variables?: true;
}
/**
 * GPU memory of this server and of each running kernel over the session, for the meter's charts: the history field of the usage document. Produced by fracnb_meter.memoryhistory; kept in the server's memory (bounded: at most capacity points a series), so it survives reloading the page but not a restart of the server.
 */
export interface IMemoryHistory {
  /**
   * When the history began (the meter's start), ISO 8601 with time zone; every at_s counts from here.
   */
  started_at: string;
  /**
   * Seconds from started_at to the latest reading: the right end of a chart.
   */
  now_s: number;
  /**
   * The most points a series holds; longer sessions are summarised in wider buckets.
   */
  capacity: number;
  server: IMemorySeries;
  /**
   * The running kernels, each with its series.
   */
  kernels: IKernelHistory[];
}
/**
 * One process group's GPU memory over time. Readings whose figure was unknown add no point.
 */
export interface IMemorySeries {
  /**
   * The width of the time bucket each point summarises, in seconds; it doubles whenever the series would hold more than capacity points.
   */
  step_s: number;
  /**
   * The highest reading of the session (the first, if reached more than once); null before any.
   */
  peak: null | IMemoryPoint;
  /**
   * The latest known reading; null before any.
   */
  latest: null | IMemoryPoint;
  /**
   * Oldest first: each bucket's highest reading, with the time it was taken.
   */
  points: IMemoryPoint[];
}
export interface IMemoryPoint {
  /**
   * Seconds after started_at.
   */
  at_s: number;
  bytes: number;
}
export interface IKernelHistory {
  /**
   * The kernel's id, as in the usage document's kernels.
   */
  id: string;
  /**
   * The notebook's server-relative path; null for a kernel without a session.
   */
  path: string | null;
  /**
   * A kernel of the same notebook (same path) that was shut down and whose series this one continues; null when the series began with this kernel (a restart keeps the kernel's id and its series).
   */
  carried_from: string | null;
  series: IMemorySeries;
}
export interface IAdviceGiven {
  state: 'advice';
  /**
   * One sentence: "Your last 6 sessions on 1/2 GPU peaked at 6.1 GiB or less. 1/8 GPU (10 GiB) would have fit."
   */
  text: string;
  /**
   * Whether the advice is a larger choice (the budget was reached) rather than a smaller one.
   */
  larger: boolean;
  /**
   * How many of the user's sessions on the choice the advice reads.
   */
  sessions: number;
  /**
   * The 95th percentile of those sessions' peaks, in bytes.
   */
  p95_bytes: number;
}
export interface IAdviceWaiting {
  state: 'waiting';
  /**
   * "No advice yet: 3 sessions needed (1 so far)."
   */
  text: string;
}
export interface INoAdvice {
  /**
   * Nothing to say: the choice fits, there is nothing smaller (or larger) to offer, the advice is turned off, or the service does not know the hub's menu (a profile_list computed per user).
   */
  state: 'none';
}
/**
 * The answer of POST {base_url}fracnb/api/hibernate: what became of each kernel. Produced by fracnb_meter.hibernation.serverside.hibernate; read by the hub's fracnb service (the stopped-server notice, metrics).
 */
export interface IHibernationReport {
  started_at: string;
  /**
   * How long the request took.
   */
  seconds: number;
  timeout_seconds: number;
  /**
   * The limit that applied: the smaller of the request's and the server's.
   */
  limit_bytes: number;
  /**
   * Bytes written by saved and partly saved kernels.
   */
  saved_bytes: number;
  /**
   * How many kernels ended in each status.
   */
  totals: {
    saved: number;
    partly_saved: number;
    failed: number;
    skipped_over_limit: number;
    busy: number;
    empty: number;
    not_supported: number;
  };
  /**
   * One entry per kernel, the most recently used first (the order they were saved in).
   */
  kernels: IKernelOutcome[];
}
export interface IKernelOutcome {
  kernel_id: string;
  /**
   * The notebook's path under the server's root; null for a kernel without one.
   */
  path: string | null;
  /**
   * saved: every variable; partly_saved: some were skipped (listed); failed: nothing new was written (reason), the previous state is kept; skipped_over_limit: the variables would not fit the limit or the free space, nothing written; busy: the kernel was running a cell and was neither interrupted nor saved; empty: no variables; not_supported: not a Python kernel, or no notebook.
   */
  status:
    'saved' | 'partly_saved' | 'failed' | 'skipped_over_limit' | 'busy' | 'empty' | 'not_supported';
  /**
   * Why, in a sentence, for any status but saved and partly_saved.
   */
  reason: string | null;
  /**
   * Bytes written (saved, partly_saved), or the bytes it would have taken (skipped_over_limit).
   */
  bytes: number;
  /**
   * Variables saved.
   */
  variables: number;
  skipped: ISkippedVariable[];
  saved_at: string | null;
  /**
   * How long the kernel's save took.
   */
  seconds: number | null;
}
export interface ISkippedVariable {
  name: string;
  type: string;
  /**
   * For people: 'an open file', 'it holds a generator', 'TypeError: cannot pickle ...'.
   */
  reason: string;
}
