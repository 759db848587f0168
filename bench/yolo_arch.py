"""A YOLOv8-class detector in plain PyTorch, for benchmarks where the ultralytics package is not
available: the published architecture's structure (Conv-BN-SiLU, C2f blocks, SPPF, a PAN neck and
a decoupled anchor-free head with distribution focal loss decoding), with the box decoding in the
forward pass as exported models carry it (anchor points built from the feature maps' shapes, which
become Shape/Range/... in ONNX). width/depth scale it like the n/s/m variants (s: 0.5/0.34).
Random weights: for timing and for checking runtimes against each other, not for detecting.
"""
import math

import torch
from torch import nn


class Conv(nn.Sequential):
    def __init__(self, cin, cout, k=1, s=1):
        super().__init__(nn.Conv2d(cin, cout, k, s, k // 2, bias=False), nn.BatchNorm2d(cout), nn.SiLU())


class Bottleneck(nn.Module):
    def __init__(self, c, shortcut):
        super().__init__()
        self.a, self.b, self.add = Conv(c, c, 3), Conv(c, c, 3), shortcut

    def forward(self, x):
        y = self.b(self.a(x))
        return x + y if self.add else y


class C2f(nn.Module):
    def __init__(self, cin, cout, n, shortcut=True):
        super().__init__()
        self.h = cout // 2
        self.cv1 = Conv(cin, 2 * self.h)
        self.cv2 = Conv((2 + n) * self.h, cout)
        self.m = nn.ModuleList(Bottleneck(self.h, shortcut) for _ in range(n))

    def forward(self, x):
        ys = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            ys.append(m(ys[-1]))
        return self.cv2(torch.cat(ys, 1))


class SPPF(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.cv1, self.cv2 = Conv(cin, cin // 2), Conv(cin // 2 * 4, cout)
        self.pool = nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.pool(x)
        y2 = self.pool(y1)
        return self.cv2(torch.cat([x, y1, y2, self.pool(y2)], 1))


class Detect(nn.Module):
    def __init__(self, nc, chs, reg_max=16):
        super().__init__()
        self.nc, self.reg_max, self.strides = nc, reg_max, (8, 16, 32)
        c2, c3 = max(16, chs[0] // 4, reg_max * 4), max(chs[0], min(nc, 100))
        self.box = nn.ModuleList(nn.Sequential(Conv(c, c2, 3), Conv(c2, c2, 3), nn.Conv2d(c2, 4 * reg_max, 1)) for c in chs)
        self.cls = nn.ModuleList(nn.Sequential(Conv(c, c3, 3), Conv(c3, c3, 3), nn.Conv2d(c3, nc, 1)) for c in chs)
        self.register_buffer("proj", torch.arange(reg_max, dtype=torch.float32))

    def forward(self, feats):
        b = feats[0].shape[0]
        outs, anchors, strides = [], [], []
        for i, x in enumerate(feats):
            outs.append(torch.cat([self.box[i](x), self.cls[i](x)], 1).view(b, 4 * self.reg_max + self.nc, -1))
            h, w = x.shape[2], x.shape[3]
            sy = torch.arange(h, device=x.device, dtype=x.dtype) + 0.5
            sx = torch.arange(w, device=x.device, dtype=x.dtype) + 0.5
            yy, xx = torch.meshgrid(sy, sx, indexing="ij")
            anchors.append(torch.stack((xx, yy), -1).view(-1, 2))
            strides.append(torch.full((h * w, 1), self.strides[i], device=x.device, dtype=x.dtype))
        y = torch.cat(outs, 2)
        anchor = torch.cat(anchors).transpose(0, 1).unsqueeze(0)
        stride = torch.cat(strides).transpose(0, 1).unsqueeze(0)
        dist, cls = y.split((4 * self.reg_max, self.nc), 1)
        dist = dist.view(b, 4, self.reg_max, -1).transpose(2, 1).softmax(1)
        dist = (dist * self.proj.view(1, -1, 1, 1)).sum(1).view(b, 4, -1)  # distribution focal loss decoding
        lt, rb = dist.chunk(2, 1)
        xy = (anchor + (rb - lt) / 2) * stride
        wh = (lt + rb) * stride
        return torch.cat([xy, wh, cls.sigmoid()], 1)


class YoloV8(nn.Module):
    def __init__(self, nc=80, width=0.25, depth=0.34):
        super().__init__()
        c = [int(math.ceil(x * width / 8) * 8) for x in (64, 128, 256, 512, 1024 if width <= 0.5 else 512)]
        n = [max(round(x * depth), 1) for x in (3, 6, 6, 3)]
        self.b0, self.b1 = Conv(3, c[0], 3, 2), Conv(c[0], c[1], 3, 2)
        self.b2, self.b3 = C2f(c[1], c[1], n[0]), Conv(c[1], c[2], 3, 2)
        self.b4, self.b5 = C2f(c[2], c[2], n[1]), Conv(c[2], c[3], 3, 2)
        self.b6, self.b7 = C2f(c[3], c[3], n[2]), Conv(c[3], c[4], 3, 2)
        self.b8, self.b9 = C2f(c[4], c[4], n[3]), SPPF(c[4], c[4])
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.h12 = C2f(c[4] + c[3], c[3], n[0], False)
        self.h15 = C2f(c[3] + c[2], c[2], n[0], False)
        self.h16, self.h18 = Conv(c[2], c[2], 3, 2), C2f(c[2] + c[3], c[3], n[0], False)
        self.h19, self.h21 = Conv(c[3], c[3], 3, 2), C2f(c[3] + c[4], c[4], n[0], False)
        self.detect = Detect(nc, (c[2], c[3], c[4]))

    def forward(self, x):
        p3 = self.b4(self.b3(self.b2(self.b1(self.b0(x)))))
        p4 = self.b6(self.b5(p3))
        p5 = self.b9(self.b8(self.b7(p4)))
        h12 = self.h12(torch.cat([self.up(p5), p4], 1))
        h15 = self.h15(torch.cat([self.up(h12), p3], 1))
        h18 = self.h18(torch.cat([self.h16(h15), h12], 1))
        h21 = self.h21(torch.cat([self.h19(h18), p5], 1))
        return self.detect([h15, h18, h21])
