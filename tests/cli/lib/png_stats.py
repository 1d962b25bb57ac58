"""Reads an 8-bit RGB or RGBA PNG (non-interlaced, as a browser's screenshot is) with zlib alone and
prints "WIDTH HEIGHT INKED_FRACTION COLOURS": the share of pixels that are not near-white and the
number of distinct colours. The browser test asserts a rendered report is neither blank nor flat."""
import struct
import sys
import zlib


def read_png(path):
    raw = open(path, "rb").read()
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise SystemExit(f"{path}: not a PNG")
    at, idat, width, height, channels = 8, b"", 0, 0, 0
    while at < len(raw):
        length, kind = struct.unpack(">I4s", raw[at:at + 8])
        body = raw[at + 8:at + 8 + length]
        at += 12 + length
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            if depth != 8 or colour not in (2, 6) or interlace:
                raise SystemExit(f"{path}: only 8-bit RGB/RGBA, non-interlaced")
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
    data = zlib.decompress(idat)
    stride = width * channels
    rows, previous, pos = [], bytearray(stride), 0
    for _ in range(height):
        kind, line = data[pos], bytearray(data[pos + 1:pos + 1 + stride])
        pos += 1 + stride
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up = previous[i]
            corner = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def main():
    width, height, channels, rows = read_png(sys.argv[1])
    inked, colours = 0, set()
    for row in rows[::2]:  # every other row and column: enough to tell a chart from a blank page
        for x in range(0, width, 2):
            r, g, b = row[x * channels:x * channels + 3]
            colours.add((r, g, b))
            inked += 1 if min(r, g, b) < 235 else 0
    sampled = ((height + 1) // 2) * ((width + 1) // 2)
    print(width, height, f"{inked / sampled:.4f}", len(colours))


main()
