/* Installed Jupyter kernelspecs (kernelspec.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/kernelspec.h"

/* kernel.json is small: a larger one is not a kernelspec. */
#define KSPEC_FILE_MAX 65536

static bool valid_name(const char *n)
{
    if (!n[0] || strlen(n) >= sizeof(((struct kspec *)0)->name))
        return false;
    for (const char *p = n; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '.' || *p == '_' || *p == '-'))
            return false;
    return true;
}

static bool strings_only(const cJSON *a, bool object)
{
    if (object ? !cJSON_IsObject(a) : !cJSON_IsArray(a))
        return false;
    for (const cJSON *v = a->child; v; v = v->next)
        if (!cJSON_IsString(v))
            return false;
    return true;
}

/* dir/name/kernel.json into *k: 0, or -1 when it is not a usable kernelspec. */
static int load(const char *dir, const char *name, struct kspec *k)
{
    memset(k, 0, sizeof(*k));
    char path[512];
    if ((size_t)snprintf(k->dir, sizeof(k->dir), "%s/%s", dir, name) >= sizeof(k->dir))
        return -1;
    snprintf(path, sizeof(path), "%s/kernel.json", k->dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    char *buf = malloc(KSPEC_FILE_MAX);
    ssize_t n = buf ? read(fd, buf, KSPEC_FILE_MAX) : -1;
    close(fd);
    cJSON *o = n > 0 && n < KSPEC_FILE_MAX ? cJSON_ParseWithLength(buf, (size_t)n) : NULL;
    free(buf);
    const cJSON *argv = cJSON_GetObjectItemCaseSensitive(o, "argv");
    const cJSON *lang = cJSON_GetObjectItemCaseSensitive(o, "language");
    const cJSON *disp = cJSON_GetObjectItemCaseSensitive(o, "display_name");
    const cJSON *env = cJSON_GetObjectItemCaseSensitive(o, "env");
    const cJSON *im = cJSON_GetObjectItemCaseSensitive(o, "interrupt_mode");
    if (!strings_only(argv, false) || !argv->child || !cJSON_IsString(lang) ||
        !cJSON_IsString(disp) || (env && !strings_only(env, true)) ||
        strlen(lang->valuestring) >= sizeof(k->language)) {
        cJSON_Delete(o);
        return -1;
    }
    snprintf(k->name, sizeof(k->name), "%.63s", name); /* (valid_name: shorter) */
    snprintf(k->language, sizeof(k->language), "%s", lang->valuestring);
    snprintf(k->display_name, sizeof(k->display_name), "%s", disp->valuestring);
    k->interrupt_message = cJSON_IsString(im) && strcmp(im->valuestring, "message") == 0;
    k->argv = cJSON_Duplicate(argv, true);
    k->env = env ? cJSON_Duplicate(env, true) : NULL;
    cJSON_Delete(o);
    return k->argv ? 0 : -1;
}

void kspec_free(struct kspec *k)
{
    cJSON_Delete(k->argv);
    cJSON_Delete(k->env);
    k->argv = k->env = NULL;
}

void kspec_free_all(struct kspec *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++)
        kspec_free(&v[i]);
    free(v);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const struct kspec *)a)->name, ((const struct kspec *)b)->name);
}

/* The directories searched, in order, NUL-separated, ending with an empty one. */
static char *search_path(void)
{
    const char *jp = getenv("JUPYTER_PATH");
    size_t len = (jp ? strlen(jp) : 0) + 64;
    char *s = malloc(len + 2);
    if (!s)
        return NULL;
    size_t at = 0;
    for (const char *p = jp; p && *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n) {
            memcpy(s + at, p, n);
            at += n;
            s[at++] = '\0';
        }
        p += n + (colon ? 1 : 0);
    }
    static const char std[] = "/usr/local/share/jupyter\0/usr/share/jupyter\0";
    memcpy(s + at, std, sizeof(std));
    return s;
}

size_t kspec_list(struct kspec **out)
{
    *out = NULL;
    char *path = search_path();
    size_t n = 0, cap = 0;
    struct kspec *v = NULL;
    for (const char *d = path; d && *d; d += strlen(d) + 1) {
        char kd[512];
        snprintf(kd, sizeof(kd), "%s/kernels", d);
        DIR *dir = opendir(kd);
        if (!dir)
            continue;
        size_t first = n; /* this directory's, sorted among themselves */
        for (struct dirent *e; (e = readdir(dir));) {
            if (!valid_name(e->d_name))
                continue;
            bool seen = false;
            for (size_t i = 0; i < n && !seen; i++)
                seen = strcasecmp(v[i].name, e->d_name) == 0;
            if (seen)
                continue;
            if (n == cap) {
                size_t nc = cap ? 2 * cap : 8;
                struct kspec *nv = realloc(v, nc * sizeof(*nv));
                if (!nv)
                    break;
                v = nv;
                cap = nc;
            }
            if (load(kd, e->d_name, &v[n]) == 0)
                n++;
        }
        closedir(dir);
        qsort(v + first, n - first, sizeof(*v), by_name);
    }
    free(path);
    qsort(v, n, sizeof(*v), by_name);
    *out = v;
    return n;
}

int kspec_find(const char *name, const char *language, struct kspec *out, struct sbxd_err *err)
{
    struct kspec *v;
    size_t n = kspec_list(&v);
    size_t at = n;
    /* By name; for a language, a kernel of that name first ("python3" for python3), then the
     * first of that language. */
    for (size_t i = 0; i < n && at == n; i++)
        if (strcmp(v[i].name, name ? name : language) == 0 &&
            (name || strcasecmp(v[i].language, language) == 0))
            at = i;
    for (size_t i = 0; !name && i < n && at == n; i++)
        if (strcasecmp(v[i].language, language) == 0)
            at = i;
    if (at < n) {
        *out = v[at];
        v[at].argv = v[at].env = NULL;
        kspec_free_all(v, n);
        return 0;
    }
    char known[256] = "";
    size_t kl = 0;
    for (size_t i = 0; i < n && kl < sizeof(known) - 1; i++)
        kl += (size_t)snprintf(known + kl, sizeof(known) - kl, "%s%s (%s)", i ? ", " : "",
                               v[i].name, v[i].language);
    kspec_free_all(v, n);
    if (name)
        return sbxd_fail(err, SBXD_E_INVALID, 0, "no Jupyter kernel '%.64s' here (installed: %s)",
                         name, n ? known : "none");
    return sbxd_fail(err, SBXD_E_INVALID, 0,
                     "no context for language '%.32s': \"bash\" and \"sh\" are shell sessions; "
                     "Jupyter kernels installed: %s",
                     language, n ? known : "none");
}
