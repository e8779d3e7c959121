#!/usr/bin/env python3
"""The core's public surface, counted from rustdoc's JSON: public items by kind, items with more than one public
path, `limits` constants, public modules and `Store`'s public inherent methods.

    RUSTC_BOOTSTRAP=1 cargo rustdoc -p sinkpoint -- -Z unstable-options --output-format json
    python3 .ci/api_surface.py "$CARGO_TARGET_DIR/doc/sinkpoint.json"

Default features (no `testkit`): what a user of the crate sees. Not run by CI; the figures go in notes and docs.
"""
import json,collections,sys
d=json.load(open(sys.argv[1]))
idx=d['index']
seen=collections.defaultdict(list)
def walk(mod_id, prefix):
    m=idx[str(mod_id)]
    for it in m['inner']['module']['items']:
        item=idx.get(str(it))
        if item is None: continue
        inner=item['inner']; kind=list(inner.keys())[0]
        if kind=='use':
            u=inner['use']
            if u['id'] is None or u.get('is_glob'): continue
            tgt=idx.get(str(u['id']))
            if tgt and list(tgt['inner'].keys())[0]=='module':
                walk(u['id'], prefix+[u['name']]); continue
            seen[u['id']].append('::'.join(prefix+[u['name']]))
        elif kind=='module':
            if item.get('visibility')=='public': walk(it, prefix+[item['name']])
        else:
            if item.get('visibility')=='public': seen[it].append('::'.join(prefix+[item['name']]))
walk(d['root'],['sinkpoint'])
kinds=collections.Counter()
for k,v in seen.items():
    it=idx.get(str(k)); kinds[list(it['inner'].keys())[0] if it else 'external']+=1
print("public items:",len(seen),dict(kinds))
dbl=[v for v in seen.values() if len(v)>1]
print("items with two paths:",len(dbl),dbl[:10])
print("limits consts:",sum(1 for v in seen.values() if any(p.startswith('sinkpoint::limits::') for p in v)))
print("public modules:",sorted(set(p.rsplit('::',1)[0] for v in seen.values() for p in v)))
# Store methods
for k,it in idx.items():
    if it.get('name')=='Store' and 'struct' in it['inner']:
        n=0
        for impl_id in it['inner']['struct']['impls']:
            im=idx[str(impl_id)]['inner']['impl']
            if im.get('trait') is None:
                n+=sum(1 for m in im['items'] if idx[str(m)].get('visibility')=='public')
        print("Store public inherent methods:",n)
