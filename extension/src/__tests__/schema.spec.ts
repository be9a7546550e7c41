/** src/usage.ts is what scripts/schema-types.mjs generates from the usage schema today. */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { test } from 'node:test';

test('the generated usage types match fracnb_schemas/schemas/usage.schema.json', () => {
  const extension = join(__dirname, '..', '..');
  // Exits 1 with a message saying to run `jlpm build:types` when they differ.
  execFileSync(process.execPath, [join(extension, 'scripts', 'schema-types.mjs'), '--check'], {
    cwd: extension,
    stdio: 'inherit'
  });
});
