#!/usr/bin/env python3
"""Checks every item of the finished shards against `mimi encode` of the same audio (stdlib only:
no numpy). Usage: compare_codes.py OUT/ REFDIR/ where REFDIR holds <key with '/' as '__'>.npy
files made by `mimi encode`; prints the count compared, exits 1 on any difference."""
import glob, json, os, struct, sys, tarfile

out, refdir = sys.argv[1], sys.argv[2]


def npy(b):
    assert b[:6] == b'\x93NUMPY', 'not npy'
    hl = struct.unpack('<H', b[8:10])[0]
    h = b[10:10 + hl].decode()
    d = b[10 + hl:]
    shape = tuple(int(x) for x in h.split('(')[1].split(')')[0].split(',') if x.strip())
    if "'<i2'" in h:
        return shape, list(struct.unpack('<%dh' % (len(d) // 2), d))
    if "'<i4'" in h:
        return shape, list(struct.unpack('<%di' % (len(d) // 4), d))
    raise ValueError('dtype ' + h)


compared, bad = 0, 0
for tar in sorted(glob.glob(os.path.join(out, 'shards', 'shard-*.tar'))):
    with tarfile.open(tar) as t:
        for m in t.getmembers():
            assert m.mtime == 0 and m.uid == 0 and m.mode == 0o644, (tar, m.name)
            if not m.name.endswith('.npy'):
                continue
            key = m.name[:-4]
            shape, codes = npy(t.extractfile(m).read())
            meta = json.loads(t.extractfile(key + '.json').read())
            ref = os.path.join(refdir, key.replace('/', '__') + '.npy')
            rshape, rcodes = npy(open(ref, 'rb').read())
            if shape != rshape or codes != rcodes or meta['frames'] != shape[1]:
                print('DIFFERENT:', tar, key, shape, rshape)
                bad += 1
            compared += 1
print('compared', compared, 'items with mimi encode;', bad, 'different')
sys.exit(1 if bad or compared == 0 else 0)
