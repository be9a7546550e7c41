/**
 * Generate the TypeScript types of the server extension's APIs from the JSON Schemas it is
 * tested against (fracnb_schemas/schemas/):
 *
 * - src/usage.ts: the usage API (usage.schema.json);
 * - src/hibernation-api.ts: the saved states, the restore request and its report
 *   (hibernation-states, restore-request and restore-report.schema.json).
 *
 *   node scripts/schema-types.mjs          write them
 *   node scripts/schema-types.mjs --check  exit 1 if one is not what it would write
 */
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { compile, compileFromFile } from 'json-schema-to-typescript';
import prettier from 'prettier';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const schemas = join(root, 'fracnb_schemas', 'schemas');

const USAGE_BANNER = `/**
 * The usage API's reply, GET {base_url}fracnb/api/usage.
 *
 * Generated from fracnb_schemas/schemas/usage.schema.json (and the schemas it refers to)
 * by \`jlpm build:types\`: edit the schema, not this file. docs/contract.md explains it.
 */`;

const HIBERNATION_BANNER = `/**
 * The hibernation API's documents: GET {base_url}fracnb/api/hibernation/states, and
 * POST {base_url}fracnb/api/hibernation/restore's request and reply.
 *
 * Generated from fracnb_schemas/schemas/hibernation-states, restore-request and
 * restore-report.schema.json by \`jlpm build:types\`: edit the schemas, not this file.
 * docs/hibernation.md explains them.
 */`;

/** One schema that names the three documents, so shared definitions are declared once. */
const HIBERNATION_DOCUMENTS = {
  title: 'Hibernation API',
  type: 'object',
  additionalProperties: false,
  required: ['states', 'restore_request', 'restore_report'],
  properties: {
    states: { $ref: 'hibernation-states.schema.json' },
    restore_request: { $ref: 'restore-request.schema.json' },
    restore_report: { $ref: 'restore-report.schema.json' }
  }
};

/** Object types become I-prefixed interfaces, as in the rest of the extension. */
function interfaceName(schema) {
  if (schema.type !== 'object' || typeof schema.title !== 'string') {
    return undefined;
  }
  const words = schema.title.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return 'I' + words.map(word => word[0].toUpperCase() + word.slice(1)).join('');
}

function options(bannerComment) {
  return {
    cwd: schemas,
    bannerComment,
    additionalProperties: false,
    declareExternallyReferenced: true,
    unreachableDefinitions: false,
    customName: interfaceName,
    format: false
  };
}

async function formatted(target, typescript) {
  const config = await prettier.resolveConfig(target);
  return prettier.format(typescript, { ...config, parser: 'typescript' });
}

const targets = [
  {
    file: join(root, 'src', 'usage.ts'),
    source: 'usage.schema.json',
    generate: () => compileFromFile(join(schemas, 'usage.schema.json'), options(USAGE_BANNER))
  },
  {
    file: join(root, 'src', 'hibernation-api.ts'),
    source: 'hibernation-states, restore-request and restore-report.schema.json',
    generate: () => compile(HIBERNATION_DOCUMENTS, 'HibernationApi', options(HIBERNATION_BANNER))
  }
];

let stale = false;
for (const target of targets) {
  const wanted = await formatted(target.file, await target.generate());
  if (process.argv.includes('--check')) {
    const current = await readFile(target.file, 'utf8').catch(() => '');
    if (current !== wanted) {
      console.error(
        `src/${target.file.split('/').pop()} does not match fracnb_schemas/schemas/${target.source}: ` +
          'run `jlpm build:types` in extension/'
      );
      stale = true;
    }
  } else {
    await writeFile(target.file, wanted);
  }
}
if (stale) {
  process.exit(1);
}
