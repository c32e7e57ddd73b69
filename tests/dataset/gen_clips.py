#!/usr/bin/env python3
"""Writes the engine tests' corpus (stdlib only): clips of 0.1 s to 2 min at 16/24/44.1/48 kHz, a
stereo file, a segment of it (and the same segment as its own file, for comparing codes), and two
corrupt files. Usage: gen_clips.py DIR MANIFEST.jsonl [CYCLES]"""
import json, math, os, random, struct, sys, wave

out, manifest = sys.argv[1], sys.argv[2]
cycles = int(sys.argv[3]) if len(sys.argv) > 3 else 4
os.makedirs(out, exist_ok=True)


def signal(seconds, rate, channels, seed):
    """Interleaved s16 bytes: a tone per channel plus noise, one second built and repeated."""
    rnd = random.Random(seed)
    f = 110.0 * (1 + seed % 7)
    second = bytearray()
    for i in range(rate):
        for c in range(channels):
            v = 0.25 * math.sin(2 * math.pi * f * (c + 1) * i / rate) + 0.1 * (rnd.random() - 0.5)
            second += struct.pack('<h', int(v * 32767))
    n = int(round(seconds * rate)) * channels * 2
    reps = n // len(second) + 1
    return (bytes(second) * reps)[:n]


def write(name, seconds, rate, channels=1, seed=0):
    with wave.open(os.path.join(out, name), 'wb') as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(signal(seconds, rate, channels, seed))


lengths = [0.1, 0.4, 1.5, 4, 10, 25, 45, 70]
rates = [16000, 24000, 44100, 48000]
entries = []
k = 0
for c in range(cycles):
    for L in lengths:
        name = 'clip%03d.wav' % k
        write(name, L + 0.013 * k, rates[k % 4], 1, k)
        e = {'path': os.path.join(os.path.basename(out), name)}
        if k % 3 == 0:
            e['id'] = 'utt-%03d' % k
        entries.append(e)
        k += 1
write('long120.wav', 120.0, 24000, 1, 99)
entries.append({'path': os.path.join(os.path.basename(out), 'long120.wav'), 'id': 'long120'})
write('stereo.wav', 6.0, 48000, 2, 5)
entries.append({'path': os.path.join(os.path.basename(out), 'stereo.wav'), 'id': 'stereo'})
entries.append({'path': os.path.join(os.path.basename(out), 'stereo.wav'), 'id': 'stereo-seg', 'start': 1.5,
                'end': 4.0, 'channel': 1})
# the segment as its own file: channel 1 of [1.5, 4.0) s
data = signal(6.0, 48000, 2, 5)
seg = b''.join(data[(i * 2 + 1) * 2:(i * 2 + 1) * 2 + 2] for i in range(72000, 192000))
with wave.open(os.path.join(out, 'segment-ref.wav.ref'), 'wb') as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(48000)
    w.writeframes(seg)
with open(os.path.join(out, 'corrupt-garbage.wav'), 'wb') as f:
    f.write(b'this is not a RIFF file at all' * 10)
with open(os.path.join(out, 'corrupt-nodata.wav'), 'wb') as f:  # a WAV header and no samples
    f.write(b'RIFF' + struct.pack('<I', 36) + b'WAVEfmt ' + struct.pack('<IHHIIHH', 16, 1, 1, 24000, 48000, 2, 16) +
            b'data' + struct.pack('<I', 0))
entries.append({'path': os.path.join(os.path.basename(out), 'corrupt-garbage.wav'), 'id': 'corrupt-garbage'})
entries.append({'path': os.path.join(os.path.basename(out), 'corrupt-nodata.wav'), 'id': 'corrupt-nodata'})
with open(manifest, 'w') as f:
    for e in entries:
        f.write(json.dumps(e) + '\n')
