"""Small data sets in Fashion-MNIST's files (28x28 images, labels 0..9), and
a data set's id as spotlab names one (common/sl_ident.h)."""
import gzip
import hashlib
import os
import struct

# in the order of sl_image_set_files: an eval job reads the first two
SET_FILES = ["t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", "train-images-idx3-ubyte.gz",
             "train-labels-idx1-ubyte.gz"]


def image_set_files(n_train=64, n_test=32, salt=7):
    """{name: gzip bytes} of a data set; salt varies the pixels."""
    out = {}
    for split, n in (("t10k", n_test), ("train", n_train)):
        pixels = bytes((i * salt + j) % 256 for i in range(n) for j in range(784))
        out[split + "-images-idx3-ubyte.gz"] = gzip.compress(struct.pack(">IIII", 0x803, n, 28, 28) + pixels, mtime=0)
        out[split + "-labels-idx1-ubyte.gz"] = gzip.compress(struct.pack(">II", 0x801, n) +
                                                             bytes(i % 10 for i in range(n)), mtime=0)
    return out


def make_image_set(folder, **kw):
    """The data set's files written into folder (made)."""
    os.makedirs(folder)
    for name, blob in image_set_files(**kw).items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(blob)


def set_id(hexes):
    """The id of the data set whose first len(hexes) files hash to hexes:
    the SHA-256 of sha256sum's lines for them."""
    return hashlib.sha256("".join("%s  %s\n" % (h, n) for h, n in zip(hexes, SET_FILES)).encode()).hexdigest()


def folder_id(folder, n):
    """The id of the first n files of the data set in folder."""
    return set_id([hashlib.sha256(open(os.path.join(folder, name), "rb").read()).hexdigest()
                   for name in SET_FILES[:n]])
