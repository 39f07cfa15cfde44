// Where the npm packages of tests/deploy/package.json live, and the repository paths the checks read.
// CTest installs the packages once into the build tree (fixture deploy.npm_ci) and passes that folder
// in POSBIAS_DEPLOY_NPM_DIR; by hand, `npm ci` in tests/deploy works too (node_modules is ignored).
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const testsDir = path.resolve(here, '..');
export const repoRoot = path.resolve(process.env.POSBIAS_REPO_ROOT ?? path.join(testsDir, '..', '..'));
export const deployDir = path.join(repoRoot, 'deploy');
const npmDir = process.env.POSBIAS_DEPLOY_NPM_DIR ?? testsDir;

// require() from the npm folder: every package used here ships CommonJS.
export const need = createRequire(path.join(npmDir, 'package.json'));

// Collects failures with the file or object they concern; report() prints them and sets the exit code.
export class Problems {
  constructor() { this.list = []; }
  add(where, message) { this.list.push(`${where}: ${message}`); }
  addAll(where, messages) { for (const m of messages) this.add(where, m); }
  report(okMessage) {
    if (this.list.length === 0) { console.log(okMessage); return 0; }
    for (const p of this.list) console.error(`FAIL ${p}`);
    console.error(`${this.list.length} problem(s)`);
    process.exitCode = 1;
    return 1;
  }
}
