// Hides secrets before anything is printed or logged.

const SECRET_PARAM = /pass|secret|token|key/i;

/** A URL with its password (and secret-looking query parameters) replaced by `****`. */
export function maskUrl(text: string): string {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    return '(set, not shown)';
  }
  if (url.password !== '') url.password = '****';
  for (const name of [...url.searchParams.keys()]) {
    if (SECRET_PARAM.test(name)) url.searchParams.set(name, '****');
  }
  return url.toString().replace(/%2A%2A%2A%2A/g, '****');
}
