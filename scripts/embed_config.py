#!/usr/bin/env python3
"""Turn a YAML file into a C source defining config_embedded_default[]."""
import sys

src, dst = sys.argv[1], sys.argv[2]
data = open(src, 'rb').read()
lines = []
for i in range(0, len(data), 16):
    lines.append('\t' + ', '.join('0x%02x' % b for b in data[i:i + 16]) + ',')
with open(dst, 'w') as out:
    out.write('/* Generated from %s by scripts/embed_config.py. */\n' % src.split('/')[-1])
    out.write('extern const char config_embedded_default[];\n')
    out.write('const char config_embedded_default[] = {\n')
    out.write('\n'.join(lines))
    out.write('\n\t0x00\n};\n')
