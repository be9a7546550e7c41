/**
 * Generate src/usage.ts, the TypeScript types of the usage API, from the JSON Schema the
 * server extension is tested against (fracnb_meter/schemas/usage.schema.json).
 *
 *   node scripts/schema-types.mjs          write src/usage.ts
 *   node scripts/schema-types.mjs --check  exit 1 if src/usage.ts is not what it would write
 */
import { readFile, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

import { compileFromFile } from 'json-schema-to-typescript';
import prettier from 'prettier';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const schemas = join(root, 'fracnb_meter', 'schemas');
const target = join(root, 'src', 'usage.ts');

const BANNER = `/**
 * The usage API's reply, GET {base_url}fracnb/api/usage.
 *
 * Generated from fracnb_meter/schemas/usage.schema.json (and the schemas it refers to)
 * by \`jlpm build:types\`: edit the schema, not this file. docs/contract.md explains it.
 */`;

/** Object types become I-prefixed interfaces, as in the rest of the extension. */
function interfaceName(schema) {
  if (schema.type !== 'object' || typeof schema.title !== 'string') {
    return undefined;
  }
  const words = schema.title.split(/[^A-Za-z0-9]+/).filter(Boolean);
  return 'I' + words.map(word => word[0].toUpperCase() + word.slice(1)).join('');
}

async function generate() {
  const typescript = await compileFromFile(join(schemas, 'usage.schema.json'), {
    cwd: schemas,
    bannerComment: BANNER,
    additionalProperties: false,
    declareExternallyReferenced: true,
    unreachableDefinitions: false,
    customName: interfaceName,
    format: false
  });
  const options = await prettier.resolveConfig(target);
  return prettier.format(typescript, { ...options, parser: 'typescript' });
}

const wanted = await generate();
if (process.argv.includes('--check')) {
  const current = await readFile(target, 'utf8').catch(() => '');
  if (current !== wanted) {
    console.error(
      'src/usage.ts does not match fracnb_meter/schemas/usage.schema.json: run `jlpm build:types` in extension/'
    );
    process.exit(1);
  }
} else {
  await writeFile(target, wanted);
}
