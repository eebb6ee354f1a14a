#!/usr/bin/python3
"""Draws the spotlab kernelspec logos: logo-32x32.png, logo-64x64.png, logo-svg.svg.

The logo is a rounded square in deep blue with a yellow lightning bolt (the
spot GPU) and a small orange dot (the "spot"). The PNGs are rasterised here
with 4x4 supersampling and written with zlib and struct only, so the script
runs anywhere Python does. Run it from any folder; it writes next to itself.

    /usr/bin/python3 kernelspec/make_logos.py
"""

import os
import struct
import zlib

BACKGROUND = (22, 46, 92)
BOLT = (255, 204, 0)
DOT = (255, 120, 40)

# Shapes in a 64-unit square; the PNG sizes scale them.
CORNER_RADIUS = 12
BOLT_POLYGON = [(36, 6), (14, 36), (29, 36), (24, 58), (50, 26), (34, 26), (40, 6)]
DOT_CENTRE = (50, 50)
DOT_RADIUS = 6


def inside_rounded_square(x, y, size=64.0, r=CORNER_RADIUS):
    if not (0 <= x <= size and 0 <= y <= size):
        return False
    cx = min(max(x, r), size - r)
    cy = min(max(y, r), size - r)
    return (x - cx) ** 2 + (y - cy) ** 2 <= r * r


def inside_polygon(x, y, poly):
    """Even-odd rule."""
    inside = False
    n = len(poly)
    for i in range(n):
        x1, y1 = poly[i]
        x2, y2 = poly[(i + 1) % n]
        if (y1 > y) != (y2 > y):
            xc = x1 + (y - y1) * (x2 - x1) / (y2 - y1)
            if x < xc:
                inside = not inside
    return inside


def inside_dot(x, y):
    dx, dy = x - DOT_CENTRE[0], y - DOT_CENTRE[1]
    return dx * dx + dy * dy <= DOT_RADIUS * DOT_RADIUS


def sample(x, y):
    """RGBA of one point in 64-unit coordinates."""
    if not inside_rounded_square(x, y):
        return (0, 0, 0, 0)
    if inside_dot(x, y):
        return DOT + (255,)
    if inside_polygon(x, y, BOLT_POLYGON):
        return BOLT + (255,)
    return BACKGROUND + (255,)


def render(size, ss=4):
    """Rows of RGBA bytes, averaged over ss*ss samples per pixel (premultiplied)."""
    scale = 64.0 / size
    rows = []
    for py in range(size):
        row = bytearray()
        for px in range(size):
            acc = [0.0, 0.0, 0.0, 0.0]
            for sy in range(ss):
                for sx in range(ss):
                    x = (px + (sx + 0.5) / ss) * scale
                    y = (py + (sy + 0.5) / ss) * scale
                    r, g, b, a = sample(x, y)
                    w = a / 255.0
                    acc[0] += r * w
                    acc[1] += g * w
                    acc[2] += b * w
                    acc[3] += a
            n = ss * ss
            alpha = acc[3] / n
            if alpha > 0:
                cov = alpha / 255.0
                rgb = [round(c / n / cov) for c in acc[:3]]
            else:
                rgb = [0, 0, 0]
            row += bytes(min(255, max(0, v)) for v in rgb) + bytes([round(alpha)])
        rows.append(bytes(row))
    return rows


def png_chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def encode_png(size, rows):
    raw = b"".join(b"\x00" + row for row in rows)  # filter type 0 on every row
    ihdr = struct.pack(">IIBBBBB", size, size, 8, 6, 0, 0, 0)  # 8-bit RGBA
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", zlib.compress(raw, 9))
        + png_chunk(b"IEND", b"")
    )


def svg():
    def hexc(c):
        return "#%02x%02x%02x" % c

    points = " ".join("%d,%d" % p for p in BOLT_POLYGON)
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="64" height="64" viewBox="0 0 64 64">\n'
        "  <title>spotlab</title>\n"
        '  <rect x="0" y="0" width="64" height="64" rx="%d" ry="%d" fill="%s"/>\n'
        '  <polygon points="%s" fill="%s"/>\n'
        '  <circle cx="%d" cy="%d" r="%d" fill="%s"/>\n'
        "</svg>\n"
        % (
            CORNER_RADIUS,
            CORNER_RADIUS,
            hexc(BACKGROUND),
            points,
            hexc(BOLT),
            DOT_CENTRE[0],
            DOT_CENTRE[1],
            DOT_RADIUS,
            hexc(DOT),
        )
    )


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for size in (32, 64):
        path = os.path.join(here, "logo-%dx%d.png" % (size, size))
        with open(path, "wb") as f:
            f.write(encode_png(size, render(size)))
        print("wrote", path)
    path = os.path.join(here, "logo-svg.svg")
    with open(path, "w") as f:
        f.write(svg())
    print("wrote", path)


if __name__ == "__main__":
    main()
