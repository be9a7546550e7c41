/**
 * The hibernation API's documents: GET {base_url}fracnb/api/hibernation/states, and
 * POST {base_url}fracnb/api/hibernation/restore's request and reply.
 *
 * Generated from fracnb_schemas/schemas/hibernation-states, restore-request and
 * restore-report.schema.json by `jlpm build:types`: edit the schemas, not this file.
 * docs/hibernation.md explains them.
 */

export interface IHibernationAPI {
  states: IHibernationStates;
  restore_request: IRestoreRequest;
  restore_report: IRestoreReport;
}
/**
 * GET {base_url}fracnb/api/hibernation/states: this server's saved states, newest first, read from their manifests (never unpickled). Produced by fracnb_meter.hibernation.serverside.list_states; read by @fracnb/meter (the restore offer and the panel), whose types are generated from this file.
 */
export interface IHibernationStates {
  /**
   * The server's folder of saved states.
   */
  directory: string;
  states: ISavedState[];
}
export interface ISavedState {
  /**
   * The entry's name, for DELETE fracnb/api/hibernation/states/<key> and the restore request.
   */
  key: string;
  path: string | null;
  notebook_file: string | null;
  saved_at: string | null;
  /**
   * The bytes of the variables that can be restored.
   */
  bytes: number;
  device_bytes: number;
  /**
   * The names of the saved variables that can be restored (a damaged state's lost ones are in lost).
   */
  variables: string[];
  /**
   * The saved variables a damaged state has lost (a file cut short), each with why; bytes then counts only the others. Read from the files' sizes, never unpickled, as the restore would find it.
   */
  lost: ISkippedVariable[];
  skipped: ISkippedVariable[];
  versions: {
    [k: string]: string;
  };
  /**
   * When this very save was last restored into a kernel; null: never (the front ends offer it).
   */
  restored_at: string | null;
  /**
   * Why the state cannot be used (not the user's own, a symlink, unreadable); it can still be discarded.
   */
  problem: string | null;
}
export interface ISkippedVariable {
  name: string;
  type: string;
  /**
   * For people: 'an open file', 'it holds a generator', 'TypeError: cannot pickle ...'.
   */
  reason: string;
}
/**
 * The body of POST {base_url}fracnb/api/hibernation/restore: restore a saved state into a running kernel of this server (the restore runs in that kernel). Sent by @fracnb/meter; checked by fracnb_meter.hibernation.handlers.
 */
export interface IRestoreRequest {
  /**
   * The entry's name, for DELETE fracnb/api/hibernation/states/<key> and the restore request.
   */
  key: string;
  kernel_id: string;
  /**
   * Restore even though the state was saved with other versions (the first answer was 'confirm').
   */
  force?: boolean;
  /**
   * What to do with saved names that already hold a value in the kernel (the first answer was 'conflict'): keep: keep the kernel's values and restore the others; take: replace them with the saved ones.
   */
  on_conflict?: 'keep' | 'take';
  /**
   * The saved_at of the state the user was offered: when the state was saved again since, nothing is restored (409) and the newer state is offered instead.
   */
  saved_at?: string;
}
/**
 * What a restore did: the answer of POST {base_url}fracnb/api/hibernation/restore, and what %fracnb_restore and the widget show. Produced in the kernel by fracnb_meter.hibernation.restorer; read by @fracnb/meter, whose types are generated from this file.
 */
export interface IRestoreReport {
  /**
   * restored: every saved variable; partly_restored: some failed (listed); failed: none; confirm: the state was saved with other versions (warnings), nothing was restored, ask again with force; refused: a file is a symlink, not the user's own or writable by others (the REST restore answers this with 409); conflict: names of the state already hold values in the kernel (conflicts), nothing was restored, ask again with on_conflict; none: no saved state. A damaged state (a file cut short) restores what it can: its reason names the file.
   */
  status: 'restored' | 'partly_restored' | 'failed' | 'confirm' | 'conflict' | 'refused' | 'none';
  reason: string | null;
  /**
   * The names restored.
   */
  restored: string[];
  /**
   * The saved variables that could not be restored, with why.
   */
  failed: ISkippedVariable[];
  /**
   * The variables the save could not keep.
   */
  skipped_at_save: ISkippedVariable[];
  /**
   * Each version that differs from the save's: 'numpy 2.4.6 → 2.5.0'.
   */
  warnings: string[];
  /**
   * The saved names that already held a value in the kernel: the ones waiting for a choice (conflict), kept as they were (on_conflict keep) or replaced (take).
   */
  conflicts: string[];
  /**
   * For each name of conflicts, its value in the kernel and its saved value, each as a short repr (at most 40 characters), for the question the user answers.
   */
  conflict_values?: {
    name: string;
    kernel: string;
    saved: string;
  }[];
  /**
   * One line each, e.g. GPU arrays restored to host memory and why.
   */
  notices: string[];
  /**
   * The saved bytes of the variables restored (not of those lost or kept as they were).
   */
  bytes: number;
  saved_at: string | null;
  seconds: number;
}
