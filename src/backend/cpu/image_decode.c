/* ImageDecoder on the CPU: encoded bytes in, [H, W, 3] (RGB or BGR) or [H, W, 1] (Grayscale)
 * uint8 out. PNG goes through libpng, JPEG through libjpeg, WebP through libwebp and JPEG 2000
 * through OpenJPEG when the build found them (KILN_HAVE_PNG, _JPEG, _WEBP, _OPENJPEG: the
 * libraries Pillow, which made the reference outputs, decodes them with); BMP, PNM (P2/P3/P5/P6)
 * and baseline uncompressed TIFF are small enough formats to read here. A format whose library
 * the build lacks fails with a message naming the format and the library.
 *
 * Every format is first decoded to 8-bit RGB; Grayscale then uses the ITU-R 601 luma weights in
 * 16-bit fixed point (what the reference implementation's Pillow does), so a gray image comes
 * back unchanged. */
#include "backend/cpu/image_impl.h"

#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_HAVE_PNG
#include <png.h>
#endif
#ifdef KILN_HAVE_JPEG
#include <jpeglib.h>
#endif
#ifdef KILN_HAVE_WEBP
#include <webp/decode.h>
#endif
#ifdef KILN_HAVE_OPENJPEG
#include <openjpeg.h>
#endif

typedef struct rgb_image {
    int64_t h, w;
    uint8_t *px; /* h * w * 3 */
    char err[256];
} rgb_image;

static int img_fail(rgb_image *im, const char *fmt, const char *arg) {
    snprintf(im->err, sizeof im->err, fmt, arg ? arg : "");
    return -1;
}

static int img_alloc(rgb_image *im, int64_t h, int64_t w) {
    if (h <= 0 || w <= 0 || h > (1 << 20) || w > (1 << 20) || h * w > ((int64_t)1 << 30))
        return img_fail(im, "image dimensions are invalid or too large%s", NULL);
    im->h = h;
    im->w = w;
    im->px = malloc((size_t)(h * w * 3));
    if (!im->px) return img_fail(im, "out of memory%s", NULL);
    return 0;
}

/* ------------------------------------------------------------------ BMP */

static uint32_t le32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t be32(const uint8_t *p) { return (uint32_t)p[3] | (uint32_t)p[2] << 8 | (uint32_t)p[1] << 16 | (uint32_t)p[0] << 24; }
static uint16_t be16(const uint8_t *p) { return (uint16_t)(p[1] | p[0] << 8); }

/* Uncompressed BMP with a BITMAPINFOHEADER or later: 24/32-bit direct colour, 1/4/8-bit palette. */
static int decode_bmp(const uint8_t *d, size_t n, rgb_image *im) {
    if (n < 54) return img_fail(im, "BMP data is truncated%s", NULL);
    uint32_t off = le32(d + 10), hsz = le32(d + 14);
    if (hsz < 40) return img_fail(im, "BMP core headers (OS/2) are not supported%s", NULL);
    int32_t w = (int32_t)le32(d + 18), h = (int32_t)le32(d + 22);
    uint16_t bpp = le16(d + 28);
    uint32_t comp = le32(d + 30), ncol = le32(d + 46);
    if (comp != 0 && !(comp == 3 && bpp == 32)) return img_fail(im, "compressed BMP is not supported%s", NULL);
    if (bpp != 1 && bpp != 4 && bpp != 8 && bpp != 24 && bpp != 32)
        return img_fail(im, "BMP with this bit depth is not supported%s", NULL);
    bool top_down = h < 0;
    int64_t H = top_down ? -(int64_t)h : h, W = w;
    if (img_alloc(im, H, W)) return -1;
    int64_t stride = ((W * bpp + 31) / 32) * 4;
    if ((uint64_t)off + (uint64_t)stride * (uint64_t)H > n) return img_fail(im, "BMP pixel data is truncated%s", NULL);
    const uint8_t *pal = d + 14 + hsz;
    if (bpp <= 8) {
        if (ncol == 0) ncol = 1u << bpp;
        if ((size_t)(pal - d) + (size_t)ncol * 4 > n) return img_fail(im, "BMP palette is truncated%s", NULL);
    }
    for (int64_t y = 0; y < H; y++) {
        const uint8_t *row = d + off + (top_down ? y : H - 1 - y) * stride;
        uint8_t *o = im->px + y * W * 3;
        for (int64_t x = 0; x < W; x++, o += 3) {
            if (bpp >= 24) {
                const uint8_t *p = row + x * (bpp / 8); /* stored B, G, R */
                o[0] = p[2], o[1] = p[1], o[2] = p[0];
            } else {
                unsigned idx = bpp == 8 ? row[x] : bpp == 4 ? (row[x / 2] >> (x % 2 ? 0 : 4)) & 15 : (row[x / 8] >> (7 - x % 8)) & 1;
                if (idx >= ncol) return img_fail(im, "BMP palette index out of range%s", NULL);
                o[0] = pal[idx * 4 + 2], o[1] = pal[idx * 4 + 1], o[2] = pal[idx * 4];
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ PNM */

/* The next header number, skipping whitespace and comments. */
static int pnm_num(const uint8_t *d, size_t n, size_t *pos, int64_t *v) {
    size_t p = *pos;
    for (;;) {
        while (p < n && (d[p] == ' ' || d[p] == '\t' || d[p] == '\n' || d[p] == '\r')) p++;
        if (p < n && d[p] == '#') {
            while (p < n && d[p] != '\n') p++;
            continue;
        }
        break;
    }
    if (p >= n || d[p] < '0' || d[p] > '9') return -1;
    int64_t r = 0;
    while (p < n && d[p] >= '0' && d[p] <= '9' && r < ((int64_t)1 << 40)) r = r * 10 + (d[p++] - '0');
    *v = r;
    *pos = p;
    return 0;
}

static int decode_pnm(const uint8_t *d, size_t n, rgb_image *im) {
    char kind = (char)d[1];
    size_t pos = 2;
    int64_t w, h, maxv;
    if (pnm_num(d, n, &pos, &w) || pnm_num(d, n, &pos, &h) || pnm_num(d, n, &pos, &maxv))
        return img_fail(im, "PNM header is malformed%s", NULL);
    if (maxv < 1 || maxv > 255) return img_fail(im, "PNM with more than 8 bits per sample is not supported%s", NULL);
    if (img_alloc(im, h, w)) return -1;
    int ch = kind == '3' || kind == '6' ? 3 : 1;
    int64_t count = h * w * ch;
    bool binary = kind == '5' || kind == '6';
    if (binary) {
        pos++; /* one whitespace byte ends the header */
        if (pos + (size_t)count > n) return img_fail(im, "PNM pixel data is truncated%s", NULL);
    }
    for (int64_t i = 0; i < h * w; i++)
        for (int c = 0; c < 3; c++) {
            int64_t v;
            if (c < ch) {
                if (binary) v = d[pos++];
                else if (pnm_num(d, n, &pos, &v)) return img_fail(im, "PNM pixel data is truncated%s", NULL);
                if (v > maxv) v = maxv;
                v = maxv == 255 ? v : (v * 255 + maxv / 2) / maxv;
                im->px[i * 3 + c] = (uint8_t)v;
            } else im->px[i * 3 + c] = im->px[i * 3]; /* gray to RGB */
        }
    return 0;
}

/* ------------------------------------------------------------------ TIFF (baseline, uncompressed) */

typedef struct tiff_rd {
    const uint8_t *d;
    size_t n;
    bool be;
} tiff_rd;

static uint32_t t16(const tiff_rd *t, size_t o) { return t->be ? be16(t->d + o) : le16(t->d + o); }
static uint32_t t32(const tiff_rd *t, size_t o) { return t->be ? be32(t->d + o) : le32(t->d + o); }

/* Value i of an IFD entry (SHORT or LONG, inline or at an offset); returns 0 when out of range. */
static int tiff_val(const tiff_rd *t, size_t entry, uint32_t i, uint32_t *v) {
    uint32_t type = t16(t, entry + 2), cnt = t32(t, entry + 4);
    if (i >= cnt) return -1;
    size_t sz = type == 3 ? 2 : type == 4 ? 4 : 0;
    if (!sz) return -1;
    size_t at = (size_t)cnt * sz <= 4 ? entry + 8 : t32(t, entry + 8);
    at += (size_t)i * sz;
    if (at + sz > t->n) return -1;
    *v = sz == 2 ? t16(t, at) : t32(t, at);
    return 0;
}

static int decode_tiff(const uint8_t *d, size_t n, rgb_image *im) {
    tiff_rd t = {d, n, d[0] == 'M'};
    size_t ifd = t32(&t, 4);
    if (ifd + 2 > n) return img_fail(im, "TIFF directory is out of range%s", NULL);
    uint32_t ne = t16(&t, ifd), w = 0, h = 0, comp = 1, photo = 2, spp = 1, planar = 1, rps = 0xffffffffu;
    size_t e_bps = 0, e_off = 0, e_cnt = 0;
    if (ifd + 2 + (size_t)ne * 12 > n) return img_fail(im, "TIFF directory is truncated%s", NULL);
    for (uint32_t k = 0; k < ne; k++) {
        size_t e = ifd + 2 + (size_t)k * 12;
        uint32_t tag = t16(&t, e), v = 0;
        switch (tag) {
        case 256: tiff_val(&t, e, 0, &w); break;
        case 257: tiff_val(&t, e, 0, &h); break;
        case 258: e_bps = e; break;
        case 259: tiff_val(&t, e, 0, &comp); break;
        case 262: tiff_val(&t, e, 0, &photo); break;
        case 273: e_off = e; break;
        case 277: tiff_val(&t, e, 0, &spp); break;
        case 278: tiff_val(&t, e, 0, &rps); break;
        case 279: e_cnt = e; break;
        case 284: tiff_val(&t, e, 0, &planar); break;
        default: (void)v; break;
        }
    }
    if (comp != 1) return img_fail(im, "compressed TIFF is not supported (only uncompressed)%s", NULL);
    if (planar != 1 || !e_off || (photo != 2 && photo != 1 && photo != 0) || spp < 1 || spp > 4)
        return img_fail(im, "this TIFF layout is not supported (baseline chunky RGB or gray only)%s", NULL);
    for (uint32_t s = 0; s < spp; s++) {
        uint32_t b = 8;
        if (e_bps && tiff_val(&t, e_bps, s, &b)) b = 8;
        if (b != 8) return img_fail(im, "TIFF with other than 8 bits per sample is not supported%s", NULL);
    }
    if (img_alloc(im, h, w)) return -1;
    if (rps == 0 || rps > h) rps = h;
    uint32_t strips = (h + rps - 1) / rps;
    for (uint32_t s = 0; s < strips; s++) {
        uint32_t off, len = 0;
        if (tiff_val(&t, e_off, s, &off)) return img_fail(im, "TIFF strip offsets are missing%s", NULL);
        uint32_t rows = s == strips - 1 ? h - s * rps : rps;
        size_t need = (size_t)rows * w * spp;
        if (e_cnt && !tiff_val(&t, e_cnt, s, &len) && len < need) return img_fail(im, "TIFF strip is short%s", NULL);
        if ((size_t)off + need > n) return img_fail(im, "TIFF strip is out of range%s", NULL);
        for (size_t i = 0; i < (size_t)rows * w; i++) {
            const uint8_t *p = d + off + i * spp;
            uint8_t *o = im->px + ((size_t)s * rps * w + i) * 3;
            if (photo == 2 && spp >= 3) o[0] = p[0], o[1] = p[1], o[2] = p[2];
            else {
                uint8_t g = photo == 0 ? (uint8_t)(255 - p[0]) : p[0];
                o[0] = o[1] = o[2] = g;
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ PNG */

#ifdef KILN_HAVE_PNG
typedef struct png_src {
    const uint8_t *d;
    size_t n, pos;
} png_src;

static void png_read_mem(png_structp p, png_bytep out, size_t len) {
    png_src *s = png_get_io_ptr(p);
    if (len > s->n - s->pos) png_error(p, "PNG data is truncated");
    memcpy(out, s->d + s->pos, len);
    s->pos += len;
}

static void png_err(png_structp p, png_const_charp msg) {
    rgb_image *im = png_get_error_ptr(p);
    snprintf(im->err, sizeof im->err, "PNG: %s", msg);
    png_longjmp(p, 1);
}
static void png_warn(png_structp p, png_const_charp msg) { (void)p, (void)msg; }

static int decode_png(const uint8_t *d, size_t n, rgb_image *im) {
    png_structp p = png_create_read_struct(PNG_LIBPNG_VER_STRING, im, png_err, png_warn);
    png_infop info = p ? png_create_info_struct(p) : NULL;
    if (!info) {
        png_destroy_read_struct(&p, NULL, NULL);
        return img_fail(im, "out of memory%s", NULL);
    }
    png_src src = {d, n, 0};
    uint8_t **volatile rows = NULL;
    if (setjmp(png_jmpbuf(p))) {
        free(rows);
        png_destroy_read_struct(&p, &info, NULL);
        return -1;
    }
    png_set_read_fn(p, &src, png_read_mem);
    png_read_info(p, info);
    /* to 8-bit RGB: 16-bit samples keep their high byte, palettes and gray expand, alpha is dropped */
    png_set_strip_16(p);
    png_set_expand(p);
    png_set_gray_to_rgb(p);
    png_set_strip_alpha(p);
    png_set_interlace_handling(p);
    png_read_update_info(p, info);
    int64_t h = png_get_image_height(p, info), w = png_get_image_width(p, info);
    if (png_get_rowbytes(p, info) != (size_t)w * 3) png_error(p, "unexpected row layout after conversion");
    if (img_alloc(im, h, w)) png_error(p, im->err);
    rows = malloc((size_t)h * sizeof *rows);
    if (!rows) png_error(p, "out of memory");
    for (int64_t y = 0; y < h; y++) rows[y] = im->px + y * w * 3;
    png_read_image(p, rows);
    free(rows);
    png_destroy_read_struct(&p, &info, NULL);
    return 0;
}
#endif

/* ------------------------------------------------------------------ JPEG */

#ifdef KILN_HAVE_JPEG
typedef struct jpeg_err {
    struct jpeg_error_mgr mgr;
    jmp_buf jb;
    rgb_image *im;
} jpeg_err;

static void jpeg_fail(j_common_ptr c) {
    jpeg_err *e = (jpeg_err *)c->err;
    char msg[JMSG_LENGTH_MAX];
    c->err->format_message(c, msg);
    snprintf(e->im->err, sizeof e->im->err, "JPEG: %s", msg);
    longjmp(e->jb, 1);
}
static void jpeg_quiet(j_common_ptr c, int level) { (void)c, (void)level; }

static int decode_jpeg(const uint8_t *d, size_t n, rgb_image *im) {
    struct jpeg_decompress_struct ci;
    jpeg_err je;
    ci.err = jpeg_std_error(&je.mgr);
    je.mgr.error_exit = jpeg_fail;
    je.mgr.emit_message = jpeg_quiet;
    je.im = im;
    if (setjmp(je.jb)) {
        jpeg_destroy_decompress(&ci);
        return -1;
    }
    jpeg_create_decompress(&ci);
    jpeg_mem_src(&ci, d, (unsigned long)n);
    jpeg_read_header(&ci, TRUE);
    if (ci.jpeg_color_space == JCS_CMYK || ci.jpeg_color_space == JCS_YCCK) {
        snprintf(im->err, sizeof im->err, "JPEG: CMYK images are not supported");
        jpeg_destroy_decompress(&ci);
        return -1;
    }
    ci.out_color_space = JCS_RGB; /* libjpeg's defaults otherwise: integer IDCT, fancy upsampling */
    jpeg_start_decompress(&ci);
    if (ci.output_components != 3 || img_alloc(im, ci.output_height, ci.output_width)) {
        if (!im->err[0]) snprintf(im->err, sizeof im->err, "JPEG: unexpected output layout");
        jpeg_destroy_decompress(&ci);
        return -1;
    }
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW row = im->px + (size_t)ci.output_scanline * (size_t)im->w * 3;
        jpeg_read_scanlines(&ci, &row, 1);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    return 0;
}
#endif

/* ------------------------------------------------------------------ WebP */

#ifdef KILN_HAVE_WEBP
static int decode_webp(const uint8_t *d, size_t n, rgb_image *im) {
    int w = 0, h = 0;
    if (!WebPGetInfo(d, n, &w, &h)) return img_fail(im, "WebP: not a valid WebP bitstream%s", NULL);
    if (img_alloc(im, h, w)) return -1;
    /* straight into RGB (an alpha channel is dropped, not composited, as Pillow's convert("RGB")) */
    size_t size = (size_t)(im->h * im->w * 3);
    if (!WebPDecodeRGBInto(d, n, im->px, size, (int)(im->w * 3)))
        return img_fail(im, "WebP: the bitstream is corrupt or truncated%s", NULL);
    return 0;
}
#endif

/* ------------------------------------------------------------------ JPEG 2000 */

#ifdef KILN_HAVE_OPENJPEG
typedef struct opj_mem {
    const uint8_t *d;
    size_t n, pos;
} opj_mem;

static OPJ_SIZE_T opj_mem_read(void *buf, OPJ_SIZE_T len, void *user) {
    opj_mem *m = user;
    if (m->pos >= m->n) return (OPJ_SIZE_T)-1; /* end of stream, as OpenJPEG expects it */
    size_t k = len < m->n - m->pos ? len : m->n - m->pos;
    memcpy(buf, m->d + m->pos, k);
    m->pos += k;
    return k;
}
static OPJ_OFF_T opj_mem_skip(OPJ_OFF_T len, void *user) {
    opj_mem *m = user;
    if (len < 0) return -1;
    size_t k = (size_t)len < m->n - m->pos ? (size_t)len : m->n - m->pos;
    m->pos += k;
    return (OPJ_OFF_T)k;
}
static OPJ_BOOL opj_mem_seek(OPJ_OFF_T to, void *user) {
    opj_mem *m = user;
    if (to < 0 || (size_t)to > m->n) return OPJ_FALSE;
    m->pos = (size_t)to;
    return OPJ_TRUE;
}
static void opj_on_error(const char *msg, void *user) {
    rgb_image *im = user;
    if (!im->err[0]) { /* the first message says what went wrong; later ones are consequences */
        snprintf(im->err, sizeof im->err, "JPEG 2000: %s", msg);
        size_t k = strlen(im->err);
        while (k && (im->err[k - 1] == '\n' || im->err[k - 1] == ' ')) im->err[--k] = 0;
    }
}
static void opj_quiet(const char *msg, void *user) { (void)msg, (void)user; }

/* component value v of precision prec (signed or not) as 8 bits: shifted into 0..255 */
static inline uint8_t j2k_sample8(int32_t v, int prec, bool sgnd) {
    if (sgnd) v += 1 << (prec - 1);
    if (prec > 8) v >>= prec - 8;
    else if (prec < 8) v <<= 8 - prec;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

static int decode_jpeg2000(const uint8_t *d, size_t n, bool raw_codestream, rgb_image *im) {
    opj_codec_t *codec = opj_create_decompress(raw_codestream ? OPJ_CODEC_J2K : OPJ_CODEC_JP2);
    opj_stream_t *stream = opj_stream_create(1 << 16, OPJ_TRUE);
    opj_image_t *img = NULL;
    opj_mem mem = {d, n, 0};
    int r = -1;
    if (!codec || !stream) {
        img_fail(im, "out of memory%s", NULL);
        goto done;
    }
    opj_set_error_handler(codec, opj_on_error, im);
    opj_set_warning_handler(codec, opj_quiet, NULL);
    opj_set_info_handler(codec, opj_quiet, NULL);
    opj_stream_set_user_data(stream, &mem, NULL);
    opj_stream_set_user_data_length(stream, n);
    opj_stream_set_read_function(stream, opj_mem_read);
    opj_stream_set_skip_function(stream, opj_mem_skip);
    opj_stream_set_seek_function(stream, opj_mem_seek);
    opj_dparameters_t prm;
    opj_set_default_decoder_parameters(&prm);
    if (!opj_setup_decoder(codec, &prm) || !opj_read_header(stream, codec, &img) ||
        !opj_decode(codec, stream, img) || !opj_end_decompress(codec, stream)) {
        if (!im->err[0]) img_fail(im, "JPEG 2000: the codestream is corrupt or truncated%s", NULL);
        goto done;
    }
    /* gray (1-2 components) or RGB (3-4): the first one or three, alpha dropped; each component
     * may be subsampled (dx, dy), read at the nearest sample as Pillow does */
    int nc = (int)img->numcomps;
    if (nc < 1 || img->x1 <= img->x0 || img->y1 <= img->y0) {
        img_fail(im, "JPEG 2000: the image has no components or no area%s", NULL);
        goto done;
    }
    if (img->color_space == OPJ_CLRSPC_SYCC || img->color_space == OPJ_CLRSPC_EYCC ||
        img->color_space == OPJ_CLRSPC_CMYK) {
        img_fail(im, "JPEG 2000: YCC and CMYK colour spaces are not supported%s", NULL);
        goto done;
    }
    int use = nc >= 3 ? 3 : 1;
    for (int k = 0; k < use; k++) {
        const opj_image_comp_t *cp = &img->comps[k];
        if (!cp->data || cp->prec < 1 || cp->prec > 31 || cp->dx < 1 || cp->dy < 1 || cp->w == 0 || cp->h == 0) {
            img_fail(im, "JPEG 2000: a component has no samples or an unusable precision%s", NULL);
            goto done;
        }
    }
    if (img_alloc(im, (int64_t)img->y1 - img->y0, (int64_t)img->x1 - img->x0)) goto done;
    for (int64_t y = 0; y < im->h; y++)
        for (int64_t x = 0; x < im->w; x++) {
            uint8_t *px = im->px + (y * im->w + x) * 3;
            for (int k = 0; k < use; k++) {
                const opj_image_comp_t *cp = &img->comps[k];
                int64_t cy = y / cp->dy, cx = x / cp->dx;
                if (cy >= cp->h) cy = cp->h - 1;
                if (cx >= cp->w) cx = cp->w - 1;
                px[k] = j2k_sample8(cp->data[cy * cp->w + cx], (int)cp->prec, cp->sgnd != 0);
            }
            if (use == 1) px[1] = px[2] = px[0];
        }
    r = 0;
done:
    if (img) opj_image_destroy(img);
    if (stream) opj_stream_destroy(stream);
    if (codec) opj_destroy_codec(codec);
    return r;
}
#endif

/* ------------------------------------------------------------------ the kernel */

kiln_status kn_cpu_image_decode(kn_kernel_ctx *c) {
    const kn_tensor *in = c->in[0];
    if (in->dtype != KILN_DTYPE_UINT8 || in->rank != 1)
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "encoded_stream must be a 1-D uint8 tensor");
    KN_CTX_PRM(c, kn_cpu_image_prepare, kn_cpu_image_prm, prm);
    int mode = prm->pixel_format;
    if (mode < 0)
        return kn_kernel_error(c, KILN_ERR_INVALID_MODEL, "pixel_format '%s' is not one of RGB, BGR, Grayscale",
                               kn_attr_string(c->node, "pixel_format", "RGB"));
    const uint8_t *d = in->data;
    size_t n = (size_t)kn_tensor_count(in);
    rgb_image im = {0};
    int r = 0;
    const char *what = NULL;
    if (n >= 8 && !memcmp(d, "\x89PNG\r\n\x1a\n", 8)) {
#ifdef KILN_HAVE_PNG
        r = decode_png(d, n, &im);
#else
        what = "PNG (this build has no libpng)";
#endif
    } else if (n >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff) {
#ifdef KILN_HAVE_JPEG
        r = decode_jpeg(d, n, &im);
#else
        what = "JPEG (this build has no libjpeg)";
#endif
    } else if (n >= 2 && d[0] == 'B' && d[1] == 'M') r = decode_bmp(d, n, &im);
    else if (n >= 3 && d[0] == 'P' && (d[1] == '2' || d[1] == '3' || d[1] == '5' || d[1] == '6')) r = decode_pnm(d, n, &im);
    else if (n >= 8 && (!memcmp(d, "II*\0", 4) || !memcmp(d, "MM\0*", 4))) r = decode_tiff(d, n, &im);
    else if (n >= 12 && !memcmp(d, "RIFF", 4) && !memcmp(d + 8, "WEBP", 4)) {
#ifdef KILN_HAVE_WEBP
        r = decode_webp(d, n, &im);
#else
        what = "WebP (this build has no libwebp)";
#endif
    } else if (n >= 12 && !memcmp(d, "\0\0\0\x0cjP  ", 8)) {
#ifdef KILN_HAVE_OPENJPEG
        r = decode_jpeg2000(d, n, false, &im);
#else
        what = "JPEG 2000 (this build has no OpenJPEG)";
#endif
    } else if (n >= 4 && !memcmp(d, "\xff\x4f\xff\x51", 4)) {
#ifdef KILN_HAVE_OPENJPEG
        r = decode_jpeg2000(d, n, true, &im);
#else
        what = "JPEG 2000 (this build has no OpenJPEG)";
#endif
    } else what = "this image format (not PNG, JPEG, WebP, JPEG 2000, BMP, PNM or TIFF)";
    if (what) return kn_kernel_error(c, KILN_ERR_UNSUPPORTED, "decoding %s is not supported", what);
    if (r) {
        free(im.px);
        return kn_kernel_error(c, KILN_ERR_INVALID_ARGUMENT, "cannot decode the image: %s", im.err);
    }
    int64_t od[3] = {im.h, im.w, mode == 2 ? 1 : 3};
    kn_tensor *y;
    kiln_status st = kn_ctx_output(c, 0, KILN_DTYPE_UINT8, 3, od, &y);
    if (st == KILN_OK) {
        uint8_t *o = y->data;
        int64_t np = im.h * im.w;
        for (int64_t i = 0; i < np; i++) {
            const uint8_t *p = im.px + i * 3;
            if (mode == 0) o[i * 3] = p[0], o[i * 3 + 1] = p[1], o[i * 3 + 2] = p[2];
            else if (mode == 1) o[i * 3] = p[2], o[i * 3 + 1] = p[1], o[i * 3 + 2] = p[0];
            else o[i] = (uint8_t)(((uint32_t)p[0] * 19595u + (uint32_t)p[1] * 38470u + (uint32_t)p[2] * 7471u + 0x8000u) >> 16);
        }
    }
    free(im.px);
    return st;
}
