// Reads a profile file telco-stap wrote with independent code and prints
// what it holds as JSON, for tests/profile.rs:
//   node check.js pprof FILE.pb.gz   -> {samples: [{stack: [leaf..root names], values, labels}], mappings}
//   node check.js speedscope FILE    -> {valid, errors, profiles: [{name, samples: [[root..leaf names]], weights}]}
'use strict';
const fs = require('fs');
const path = require('path');
const zlib = require('zlib');
const here = path.join(__dirname, 'node');
const modules = path.join(here, 'node_modules');

const [kind, file] = process.argv.slice(2);
if (kind === 'pprof') {
  const { Profile } = require(path.join(modules, 'pprof-format'));
  const p = Profile.decode(zlib.gunzipSync(fs.readFileSync(file)));
  const str = (i) => p.stringTable.strings[Number(i)];
  const fns = new Map(p.function.map((f) => [Number(f.id), str(f.name)]));
  const locs = new Map(p.location.map((l) => [Number(l.id), l.line.map((ln) => fns.get(Number(ln.functionId)))]));
  const out = {
    sampleTypes: p.sampleType.map((t) => [str(t.type), str(t.unit)]),
    mappings: p.mapping.map((m) => ({ file: str(m.filename), buildId: str(m.buildId), start: String(m.memoryStart) })),
    samples: p.sample.map((s) => ({
      stack: s.locationId.flatMap((id) => locs.get(Number(id)) || ['?']),
      values: s.value.map(Number),
      labels: Object.fromEntries(s.label.map((l) => [str(l.key), Number(l.num) || str(l.str)])),
    })),
  };
  console.log(JSON.stringify(out));
} else if (kind === 'speedscope') {
  const Ajv = require(path.join(modules, 'ajv'));
  const schema = JSON.parse(fs.readFileSync(path.join(here, 'speedscope-schema.json')));
  const doc = JSON.parse(fs.readFileSync(file));
  const ajv = new Ajv({ allErrors: true, strict: false });
  const validate = ajv.compile({ ...schema, $ref: '#/definitions/FileFormat.File' });
  const valid = validate(doc);
  const frames = doc.shared.frames;
  console.log(JSON.stringify({
    valid,
    errors: validate.errors || [],
    profiles: doc.profiles.map((pr) => ({
      name: pr.name,
      samples: pr.samples.map((st) => st.map((i) => frames[i].name)),
      weights: pr.weights,
    })),
  }));
} else {
  console.error('usage: node check.js pprof|speedscope FILE');
  process.exit(2);
}
