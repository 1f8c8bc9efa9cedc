// JPEG (libjpeg-turbo) and PNG (libpng) decoding to 8-bit gray or RGB, JPEG encoding. Both
// libraries report fatal errors through longjmp; every call here sets a jump target first so a
// corrupt file becomes an error string, never an exit or a crash.
#include "loader/image.h"

#include <stdio.h>  // before jpeglib.h, which uses FILE

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include "util/common.h"

int image_kind(const uint8_t *d, size_t n) {
    if (n >= 3 && d[0] == 0xFF && d[1] == 0xD8 && d[2] == 0xFF) return IMAGE_JPEG;
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (n >= 8 && memcmp(d, png_sig, 8) == 0) return IMAGE_PNG;
    return IMAGE_UNKNOWN;
}

void image_rgb_to_gray(uint8_t *dst, const uint8_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint32_t y = src[3 * i] * 19595u + src[3 * i + 1] * 38470u + src[3 * i + 2] * 7471u + 0x8000u;
        dst[i] = (uint8_t)(y >> 16);
    }
}

static void gray_to_rgb(uint8_t *dst, const uint8_t *src, size_t n) {
    // Back to front so dst may alias the start of src.
    for (size_t i = n; i-- > 0;) {
        uint8_t v = src[i];
        dst[3 * i] = dst[3 * i + 1] = dst[3 * i + 2] = v;
    }
}

uint64_t image_max_pixels = IMAGE_MAX_PIXELS;

static int check_dims(uint64_t w, uint64_t h, char *err, size_t errlen) {
    if (w == 0 || h == 0) return ct_fail(err, errlen, "image has zero size (%llux%llu)", (unsigned long long)w,
                                         (unsigned long long)h);
    if (w > IMAGE_MAX_DIM || h > IMAGE_MAX_DIM || w * h > image_max_pixels)
        return ct_fail(err, errlen, "image of %llux%llu pixels is larger than supported (%u per side, %llu pixels)",
                       (unsigned long long)w, (unsigned long long)h, IMAGE_MAX_DIM, (unsigned long long)image_max_pixels);
    return 0;
}

// ---------------------------------------------------------------------------------------------
// JPEG

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
    int eof;  // saw the premature-end-of-file warning
} JpegErr;

static void jpeg_error_exit(j_common_ptr cinfo) {
    JpegErr *e = (JpegErr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, e->msg);
    longjmp(e->jump, 1);
}
static void jpeg_quiet(j_common_ptr cinfo, int level) {
    if (level < 0) {
        cinfo->err->num_warnings++;
        if (cinfo->err->msg_code == JWRN_JPEG_EOF) ((JpegErr *)cinfo->err)->eof = 1;
    }
}

// Progressive JPEGs can carry thousands of tiny scans that make decoding take minutes; real
// encoders use about ten. Refuse absurd scan counts (the limit libjpeg-turbo's own tools use).
typedef struct {
    struct jpeg_progress_mgr pub;
    int max_scans;
} JpegProgress;
static void jpeg_scan_limit(j_common_ptr cinfo) {
    JpegProgress *p = (JpegProgress *)cinfo->progress;
    if (cinfo->is_decompressor) {
        j_decompress_ptr d = (j_decompress_ptr)cinfo;
        if (d->input_scan_number > p->max_scans) {
            JpegErr *e = (JpegErr *)cinfo->err;
            snprintf(e->msg, sizeof e->msg, "progressive JPEG with more than %d scans", p->max_scans);
            longjmp(e->jump, 1);
        }
    }
}

// Decode into an 8-bit buffer with cinfo's natural component count (1, 3 or 4), as described by
// *out_comps. mode: 0 allocate (dst NULL), 1 into dst of exactly want_h x want_w x want_c.
// Colour handling: gray -> 1 comp; YCbCr/RGB -> 3 comps RGB; CMYK/YCCK -> 4 comps CMYK with
// *adobe_inverted set when the file uses Photoshop's inverted convention.
typedef struct {
    uint8_t *pixels;
    uint32_t h, w;
    int comps;
    int inverted_cmyk;
} JpegOut;

static int jpeg_decode_impl(const uint8_t *data, size_t n, int want_c, uint8_t *dst, uint32_t want_h,
                            uint32_t want_w, JpegOut *out, char *err, size_t errlen) {
    struct jpeg_decompress_struct cinfo;
    JpegErr jerr;
    JpegProgress prog;
    uint8_t *volatile buf = NULL;
    volatile int owns = 0;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = jpeg_error_exit;
    jerr.pub.emit_message = jpeg_quiet;
    jerr.msg[0] = 0;
    jerr.eof = 0;
    if (setjmp(jerr.jump)) {
        jpeg_destroy_decompress(&cinfo);
        if (owns) free(buf);
        return ct_fail(err, errlen, "JPEG decode failed: %s", jerr.msg[0] ? jerr.msg : "corrupt data");
    }
    jpeg_create_decompress(&cinfo);
    memset(&prog, 0, sizeof prog);
    prog.pub.progress_monitor = jpeg_scan_limit;
    prog.max_scans = 500;
    cinfo.progress = &prog.pub;
    if (n > (unsigned long)-1) n = (unsigned long)-1;
    jpeg_mem_src(&cinfo, data, (unsigned long)n);
    jpeg_read_header(&cinfo, TRUE);
    int comps;
    switch (cinfo.jpeg_color_space) {
    case JCS_GRAYSCALE: comps = 1; cinfo.out_color_space = JCS_GRAYSCALE; break;
    case JCS_YCbCr:
    case JCS_RGB: comps = 3; cinfo.out_color_space = JCS_RGB; break;
    case JCS_CMYK:
    case JCS_YCCK: comps = 4; cinfo.out_color_space = JCS_CMYK; break;
    default:
        snprintf(jerr.msg, sizeof jerr.msg, "unsupported JPEG colour space %d", (int)cinfo.jpeg_color_space);
        longjmp(jerr.jump, 1);
    }
    if (dst) {
        // Shard payload: the index fixed the size and channel count; a colour JPEG decodes
        // straight to RGB, a gray one to gray (libjpeg converts between the two if asked).
        if (cinfo.image_width != want_w || cinfo.image_height != want_h) {
            snprintf(jerr.msg, sizeof jerr.msg, "JPEG is %ux%u, index says %ux%u", cinfo.image_width,
                     cinfo.image_height, want_w, want_h);
            longjmp(jerr.jump, 1);
        }
        if (comps == 4) {
            snprintf(jerr.msg, sizeof jerr.msg, "CMYK JPEG is not a valid shard payload");
            longjmp(jerr.jump, 1);
        }
        cinfo.out_color_space = want_c == 1 ? JCS_GRAYSCALE : JCS_RGB;
        comps = want_c;
    } else if (check_dims(cinfo.image_width, cinfo.image_height, jerr.msg, sizeof jerr.msg) != 0) {
        longjmp(jerr.jump, 1);
    }
    jpeg_start_decompress(&cinfo);
    if ((int)cinfo.output_components != comps || cinfo.output_width != cinfo.image_width ||
        cinfo.output_height != cinfo.image_height) {
        snprintf(jerr.msg, sizeof jerr.msg, "unexpected JPEG output layout");
        longjmp(jerr.jump, 1);
    }
    size_t stride = (size_t)cinfo.output_width * comps;
    if (dst) {
        buf = dst;
    } else {
        buf = malloc(stride * cinfo.output_height);
        if (!buf) {
            snprintf(jerr.msg, sizeof jerr.msg, "out of memory");
            longjmp(jerr.jump, 1);
        }
        owns = 1;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = buf + stride * cinfo.output_scanline;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    // A truncated file is only a warning to libjpeg (it pads the image with gray): count it as
    // corrupt, as PIL does. Other warnings (extraneous bytes before a marker, common in real photo
    // collections) decode fine and are tolerated, except in shard payloads, which we wrote ourselves.
    if (jerr.eof || (dst && jerr.pub.num_warnings > 0)) {
        jpeg_destroy_decompress(&cinfo);
        if (owns) free(buf);
        return ct_fail(err, errlen, "JPEG data is %s", jerr.eof ? "truncated (premature end of file)" : "corrupt");
    }
    out->inverted_cmyk = cinfo.saw_Adobe_marker;
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    out->pixels = buf;
    out->h = cinfo.output_height;
    out->w = cinfo.output_width;
    out->comps = comps;
    return 0;
}

int image_decode_jpeg_into(const uint8_t *data, size_t n, uint32_t channels, uint8_t *dst, uint32_t height,
                           uint32_t width, char *err, size_t errlen) {
    if (image_kind(data, n) != IMAGE_JPEG) return ct_fail(err, errlen, "payload is not a JPEG");
    JpegOut out;
    return jpeg_decode_impl(data, n, (int)channels, dst, height, width, &out, err, errlen);
}

static int decode_jpeg(const uint8_t *data, size_t n, int channels, uint8_t **pixels, uint32_t *height,
                       uint32_t *width, char *err, size_t errlen) {
    JpegOut o;
    if (jpeg_decode_impl(data, n, 0, NULL, 0, 0, &o, err, errlen) != 0) return -1;
    size_t npix = (size_t)o.h * o.w;
    uint8_t *px = o.pixels;
    if (o.comps == 4) {
        // CMYK -> RGB: R = (255-C)(255-K)/255. Photoshop (Adobe marker) stores inverted inks, so
        // there the stored values already are 255-C and 255-K.
        uint8_t *rgb = malloc(npix * 3);
        if (!rgb) {
            free(px);
            return ct_fail(err, errlen, "out of memory");
        }
        for (size_t i = 0; i < npix; i++) {
            const uint8_t *q = px + 4 * i;
            uint32_t c = q[0], m = q[1], y = q[2], k = q[3];
            if (!o.inverted_cmyk) c = 255 - c, m = 255 - m, y = 255 - y, k = 255 - k;
            rgb[3 * i] = (uint8_t)((c * k + 127) / 255);
            rgb[3 * i + 1] = (uint8_t)((m * k + 127) / 255);
            rgb[3 * i + 2] = (uint8_t)((y * k + 127) / 255);
        }
        free(px);
        px = rgb;
        o.comps = 3;
    }
    if (channels == 1 && o.comps == 3) {
        image_rgb_to_gray(px, px, npix);
    } else if (channels == 3 && o.comps == 1) {
        uint8_t *rgb = realloc(px, npix * 3);
        if (!rgb) {
            free(px);
            return ct_fail(err, errlen, "out of memory");
        }
        px = rgb;
        gray_to_rgb(px, px, npix);
    }
    *pixels = px;
    *height = o.h;
    *width = o.w;
    return 0;
}

uint8_t *image_encode_jpeg(const uint8_t *pixels, uint32_t height, uint32_t width, uint32_t channels, int quality,
                           size_t *out_size, char *err, size_t errlen) {
    if (channels != 1 && channels != 3) {
        ct_fail(err, errlen, "JPEG needs 1 or 3 channels, got %u", channels);
        return NULL;
    }
    if (quality < 1 || quality > 100) {
        ct_fail(err, errlen, "JPEG quality %d outside 1..100", quality);
        return NULL;
    }
    struct jpeg_compress_struct cinfo;
    JpegErr jerr;
    unsigned char *volatile mem = NULL;
    unsigned long mem_size = 0;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&jerr.pub);
    jerr.pub.error_exit = jpeg_error_exit;
    jerr.pub.emit_message = jpeg_quiet;
    if (setjmp(jerr.jump)) {
        jpeg_destroy_compress(&cinfo);
        free(mem);
        ct_fail(err, errlen, "JPEG encode failed: %s", jerr.msg);
        return NULL;
    }
    jpeg_create_compress(&cinfo);
    unsigned char *m = NULL;
    jpeg_mem_dest(&cinfo, &m, &mem_size);
    cinfo.image_width = width;
    cinfo.image_height = height;
    cinfo.input_components = (int)channels;
    cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&cinfo);
    jpeg_set_quality(&cinfo, quality, TRUE);
    jpeg_start_compress(&cinfo, TRUE);
    size_t stride = (size_t)width * channels;
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = (JSAMPROW)(pixels + stride * cinfo.next_scanline);
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    mem = m;
    jpeg_destroy_compress(&cinfo);
    // Copy out of libjpeg's buffer so the caller frees with free() whatever allocator it used.
    uint8_t *out = malloc(mem_size ? mem_size : 1);
    if (out) memcpy(out, mem, mem_size);
    free(mem);
    if (!out) ct_fail(err, errlen, "out of memory");
    *out_size = mem_size;
    return out;
}

// ---------------------------------------------------------------------------------------------
// PNG

typedef struct {
    const uint8_t *data;
    size_t n, pos;
} PngSrc;

typedef struct {
    jmp_buf jump;
    char msg[200];
} PngErr;

static void png_read_mem(png_structp png, png_bytep out, png_size_t len) {
    PngSrc *s = (PngSrc *)png_get_io_ptr(png);
    if (len > s->n - s->pos) png_error(png, "file is truncated");
    memcpy(out, s->data + s->pos, len);
    s->pos += len;
}
static void png_on_error(png_structp png, png_const_charp msg) {
    PngErr *e = (PngErr *)png_get_error_ptr(png);
    snprintf(e->msg, sizeof e->msg, "%s", msg);
    longjmp(e->jump, 1);
}
static void png_on_warning(png_structp png, png_const_charp msg) { (void)png; (void)msg; }

static int decode_png(const uint8_t *data, size_t n, int channels, uint8_t **pixels, uint32_t *height,
                      uint32_t *width, char *err, size_t errlen) {
    PngErr perr;
    PngSrc src = {data, n, 0};
    perr.msg[0] = 0;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &perr, png_on_error, png_on_warning);
    if (!png) return ct_fail(err, errlen, "out of memory");
    png_infop info = png_create_info_struct(png);
    uint8_t *volatile buf = NULL;
    png_bytep *volatile rows = NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return ct_fail(err, errlen, "out of memory");
    }
    if (setjmp(perr.jump)) {
        png_destroy_read_struct(&png, &info, NULL);
        free(buf);
        free(rows);
        return ct_fail(err, errlen, "PNG decode failed: %s", perr.msg[0] ? perr.msg : "corrupt data");
    }
    png_set_read_fn(png, &src, png_read_mem);
    // CRC errors in ancillary chunks are what other readers tolerate too; critical ones stay fatal.
    png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_WARN_DISCARD);
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (check_dims(w, h, perr.msg, sizeof perr.msg) != 0) longjmp(perr.jump, 1);
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    // Normalise to 8-bit gray or RGB without alpha: expand palettes and low bit depths, keep the
    // high byte of 16-bit samples, drop alpha (tRNS too: it is alpha, ignored as PIL's convert does).
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (depth == 16) png_set_strip_16(png);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    int comps = png_get_channels(png, info);
    if (png_get_bit_depth(png, info) != 8 || (comps != 1 && comps != 3)) {
        snprintf(perr.msg, sizeof perr.msg, "unsupported PNG layout (%d channels, %d bits)", comps,
                 png_get_bit_depth(png, info));
        longjmp(perr.jump, 1);
    }
    size_t stride = (size_t)w * comps;
    // Room for the RGB expansion of a gray image, done in place afterwards.
    buf = malloc((size_t)w * h * (comps == 1 && channels == 3 ? 3 : comps));
    rows = malloc(sizeof(png_bytep) * h);
    if (!buf || !rows) {
        snprintf(perr.msg, sizeof perr.msg, "out of memory");
        longjmp(perr.jump, 1);
    }
    for (png_uint_32 y = 0; y < h; y++) rows[y] = buf + stride * y;
    png_read_image(png, rows);
    png_read_end(png, NULL);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    uint8_t *px = buf;
    size_t npix = (size_t)w * h;
    if (channels == 1 && comps == 3) image_rgb_to_gray(px, px, npix);
    else if (channels == 3 && comps == 1) gray_to_rgb(px, px, npix);
    *pixels = px;
    *height = h;
    *width = w;
    return 0;
}

int image_decode(const uint8_t *data, size_t n, int channels, uint8_t **pixels, uint32_t *height, uint32_t *width,
                 char *err, size_t errlen) {
    if (channels != 1 && channels != 3) return ct_fail(err, errlen, "channel count %d (must be 1 or 3)", channels);
    if (n == 0) return ct_fail(err, errlen, "empty file");
    switch (image_kind(data, n)) {
    case IMAGE_JPEG: return decode_jpeg(data, n, channels, pixels, height, width, err, errlen);
    case IMAGE_PNG: return decode_png(data, n, channels, pixels, height, width, err, errlen);
    default: return ct_fail(err, errlen, "not a JPEG or PNG file (unrecognised leading bytes)");
    }
}
