/**
 * The panel's "Saved variables" section: each saved state of this server, with Restore (when
 * its notebook has a running kernel) and Discard.
 */
import type { ISavedState } from './hibernation-api';
import type { Hibernation } from './hibernation';
import { lostText, offerText } from './offers';

function button(label: string, title: string, onClick: () => void, disabled = false): HTMLElement {
  const node = document.createElement('button');
  node.className = 'jp-mod-styled fracnb-meter-state-button';
  node.textContent = label;
  node.title = title;
  node.disabled = disabled;
  node.addEventListener('click', onClick);
  return node;
}

function stateRow(hibernation: Hibernation, state: ISavedState): HTMLElement {
  const row = document.createElement('li');
  row.className = 'fracnb-meter-state';
  row.dataset.key = state.key;
  const name = document.createElement('div');
  name.className = 'fracnb-meter-state-path';
  name.textContent = state.path ?? state.notebook_file ?? state.key;
  const text = document.createElement('div');
  text.className = 'fracnb-meter-state-text';
  if (state.problem !== null) {
    text.textContent = state.problem;
    text.classList.add('fracnb-meter-reason');
  } else {
    const skipped = state.skipped.map(s => `${s.name} (${s.reason})`).join(', ');
    const count = state.variables.length;
    text.textContent =
      `${offerText(state)}: ${count} ${count === 1 ? 'variable' : 'variables'}` +
      (skipped ? `; not saved: ${skipped}` : '') +
      (state.lost.length > 0 ? `; lost, the saved state is damaged: ${lostText(state)}` : '') +
      (state.restored_at === null ? '' : '; restored once');
  }
  const kernel = hibernation.kernelFor(state.path);
  const actions = document.createElement('div');
  actions.className = 'fracnb-meter-state-actions';
  if (state.problem === null) {
    const title =
      kernel === null
        ? 'Open the notebook (with a kernel) to restore its variables'
        : "Load the saved variables into the notebook's kernel";
    actions.append(
      button('Restore', title, () => void hibernation.restore(state, kernel ?? ''), kernel === null)
    );
  }
  actions.append(
    button('Discard', 'Delete the saved variables', () => void hibernation.discard(state))
  );
  row.append(name, text, actions);
  return row;
}

/** The section, or null when nothing is saved. */
export function savedStatesView(hibernation: Hibernation): HTMLElement | null {
  if (hibernation.states.length === 0) {
    return null;
  }
  const section = document.createElement('section');
  section.className = 'fracnb-meter-section fracnb-meter-saved';
  const heading = document.createElement('h3');
  heading.className = 'fracnb-meter-heading';
  heading.textContent = 'Saved variables';
  const list = document.createElement('ul');
  list.className = 'fracnb-meter-states';
  list.append(...hibernation.states.map(state => stateRow(hibernation, state)));
  section.append(heading, list);
  return section;
}
