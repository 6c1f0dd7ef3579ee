// Compiles every *.sol file beside this script with solc-js and writes one
// artefact per deployable contract, <Name>.json with its ABI, creation
// bytecode and runtime (deployed) bytecode, the code a genesis alloc
// installs at an address without running a constructor, into the --out directory, removing artefacts of contracts that
// are gone. Run by make contracts; TestIssue47_ContractsCurrent runs it into
// a temporary directory and compares.
//
//   node compile.js --solc <path to the solc package> --out <directory>
'use strict';

const fs = require('fs');
const path = require('path');

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) {
    console.error(`usage: node compile.js --solc <solc package dir> --out <dir> (missing ${name})`);
    process.exit(2);
  }
  return process.argv[i + 1];
}

const solc = require(path.resolve(arg('--solc')));
const out = path.resolve(arg('--out'));

// The compiler must be the pinned one: another version gives other bytes.
const pinned = require(path.join(__dirname, 'solcjs', 'package.json')).devDependencies.solc;
if (!solc.version().startsWith(pinned + '+')) {
  console.error(`compile.js: solc-js ${solc.version()} is not the pinned ${pinned}; run make solcjs`);
  process.exit(1);
}

const sources = {};
for (const f of fs.readdirSync(__dirname).filter((f) => f.endsWith('.sol')).sort()) {
  sources[f] = { content: fs.readFileSync(path.join(__dirname, f), 'utf8') };
}

// Fixed settings: the same sources give the same bytes. No metadata hash in
// the bytecode, so a comment or a path does not change it.
const input = {
  language: 'Solidity',
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: 'cancun',
    metadata: { bytecodeHash: 'none' },
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object', 'evm.deployedBytecode.object'] } },
  },
};

const output = JSON.parse(solc.compile(JSON.stringify(input)));
let failed = false;
for (const e of output.errors || []) {
  console.error(e.formattedMessage || e.message);
  if (e.severity === 'error') failed = true;
}
if (failed) process.exit(1);

fs.mkdirSync(out, { recursive: true });
const written = new Set();
for (const source of Object.keys(output.contracts).sort()) {
  for (const name of Object.keys(output.contracts[source]).sort()) {
    const c = output.contracts[source][name];
    if (!c.evm.bytecode.object) continue; // an interface or abstract contract
    if (written.has(name)) {
      console.error(`compile.js: two contracts named ${name}`);
      process.exit(1);
    }
    const artefact = {
      contractName: name,
      sourceName: source,
      compiler: 'solc-js ' + solc.version(),
      abi: c.abi,
      bytecode: '0x' + c.evm.bytecode.object,
      deployedBytecode: '0x' + c.evm.deployedBytecode.object,
    };
    fs.writeFileSync(path.join(out, name + '.json'), JSON.stringify(artefact, null, 2) + '\n');
    written.add(name + '.json');
  }
}
for (const f of fs.readdirSync(out)) {
  if (f.endsWith('.json') && !written.has(f)) fs.unlinkSync(path.join(out, f));
}
console.log(`compile.js: ${written.size} contracts into ${path.relative(process.cwd(), out) || '.'}`);
